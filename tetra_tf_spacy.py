"""spaCy's entry point for the ``tetra_tf`` pipeline component, outside the tetra_tf package.

spaCy imports every installed ``spacy_factories`` entry point whenever it creates any
pipeline. Importing the tetra_tf package selects legacy Keras for TensorFlow
(TF_USE_LEGACY_KERAS=1), which must not happen to spaCy users who never add the component;
so this module only registers the factory, and tetra_tf loads when the component is added.
The component itself is tetra_tf/spacy_component.py.
"""

from spacy.language import Language

FACTORY_NAME = "tetra_tf"
DEFAULT_BATCH_SIZE = 64


@Language.factory(FACTORY_NAME, default_config={"batch_size": DEFAULT_BATCH_SIZE})
def make_tetra_tf(nlp: Language, name: str, model_dir: str, batch_size: int):
    """The ``tetra_tf`` factory: model_dir is an export (tetra_tf.export's --export_dir);
    batch_size is sentences per call of the SavedModel."""
    from tetra_tf.spacy_component import TetraTfComponent  # pylint: disable=import-outside-toplevel

    return TetraTfComponent(nlp, name, model_dir, batch_size)
