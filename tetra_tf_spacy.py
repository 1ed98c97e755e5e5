"""spaCy's entry point for the ``tetra_tf`` pipeline component, outside the tetra_tf package.

spaCy imports every installed ``spacy_factories`` entry point whenever it creates any
pipeline. A spaCy user who never adds the component should pay nothing for it (no nltk, no
TensorFlow, no tetra_tf module), so this module only registers the factory, and tetra_tf
loads when the component is added. The component itself is tetra_tf/integrations/spacy_component.py.
"""

# No `from __future__ import annotations` here: spaCy validates a component's config
# against the factory's annotations, which must be real types.
from typing import TYPE_CHECKING, Optional

from spacy.language import Language

if TYPE_CHECKING:
    from tetra_tf.integrations.spacy_component import TetraTfComponent

FACTORY_NAME = "tetra_tf"
"""The component's name for `nlp.add_pipe`."""
DEFAULT_DISABLE_TAGGER = False
"""Whether `token.tag_` is left alone, unless configured (benepar's default: it is not)."""
DEFAULT_MARGINALS = False
"""Whether constituents get their probabilities, unless configured (they cost time)."""
DEFAULT_SPAN_MARGINALS = None
"""The least probability of a sentence's labelled spans to list, unless configured (None:
none are listed)."""


@Language.factory(FACTORY_NAME, assigns=["token.tag"],
                  default_config={"model_dir": None, "batch_size": None,
                                  "disable_tagger": DEFAULT_DISABLE_TAGGER,
                                  "marginals": DEFAULT_MARGINALS,
                                  "span_marginals": DEFAULT_SPAN_MARGINALS})
def make_tetra_tf(nlp: Language, name: str, model_dir: Optional[str], batch_size: Optional[int],
                  disable_tagger: bool, marginals: bool,
                  span_marginals: Optional[float]) -> "TetraTfComponent":
    """The ``tetra_tf`` factory, called by ``nlp.add_pipe("tetra_tf", config={...})``.

    Args:
        nlp: the pipeline.
        name: the component's name in it.
        model_dir: a packaged model's name, or an export directory (``python -m
            tetra_tf.export``'s ``--export_dir``); None: the model packaged with tetra-tf
            (``tetra_tf.packaged_models.DEFAULT_MODEL``).
        batch_size: sentences per call of the model (None: every way in's default,
            `tetra_tf.contract.export_format.DEFAULT_BATCH_SIZE`).
        disable_tagger: leave ``token.tag_`` alone instead of writing the parser's POS
            tags into it (benepar's option of the same name).
        marginals: also give constituents and sentences their probabilities
            (``Span._.constituent_probability``, ``Span._.tree_probability``).
        span_marginals: a probability p from 0 to 1: also give each sentence its
            labelled spans of at least p (``Span._.span_probabilities``), and what
            marginals gives (None: not).

    Returns:
        The component (`tetra_tf.integrations.spacy_component.TetraTfComponent`).

    Example:
        ```python
        nlp.add_pipe("tetra_tf", config={"model_dir": "models/tetra/1", "batch_size": 32})
        ```
    """
    from tetra_tf.integrations.spacy_component import TetraTfComponent  # noqa: PLC0415

    return TetraTfComponent(nlp, name, model_dir, batch_size, disable_tagger, marginals,
                            span_marginals)
