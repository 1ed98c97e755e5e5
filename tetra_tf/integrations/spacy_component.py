"""A spaCy v3 pipeline component: constituency parses of sentences, as benepar gives them.

The `tetra_tf` component parses every sentence of a doc with an exported tetra-tf model
(the directory `python -m tetra_tf.export` writes) and sets benepar's attributes on spans
and tokens, so code written for benepar reads the same answers.

```python
import spacy

nlp = spacy.load("en_core_web_sm")  # or spacy.blank("en") + nlp.add_pipe("sentencizer")
nlp.add_pipe("tetra_tf")  # the packaged model; config={"model_dir": ...} for your own
doc = nlp("The time for action is now. It is never too late to do something.")
sent = next(doc.sents)
sent._.parse_string    # "(S (NP (NP (DT The) (NN time)) ...) (. .))"
sent._.labels          # ("S",)
list(sent._.children)  # [The time for action, is now, .]
[t.tag_ for t in sent]  # ["DT", "NN", "IN", "NN", "VBZ", "RB", "."]
```

`nlp.add_pipe("tetra_tf")` works without importing tetra_tf first: the factory is
registered through spaCy's `spacy_factories` entry point by the small module
`tetra_tf_spacy`, so spaCy never imports tetra_tf (or TensorFlow) unless the component is
added.

### Configuration

| Setting | Default | Meaning |
|---|---|---|
| `model_dir` | `None`: the model packaged with tetra-tf | a packaged model's name, or your own export's directory |
| `batch_size` | `None`: 64, every way in's default | sentences per call of the model |
| `disable_tagger` | `False` | leave `token.tag_` alone instead of writing the parser's POS tags (benepar's option of the same name) |
| `marginals` | `False` | also set `_.constituent_probability` and `_.tree_probability` (parses with `Parser.parse_each(marginals=True)`) |
| `span_marginals` | `None` | a probability `p` from 0 to 1: also set each sentence's `_.span_probabilities`, and what `marginals` sets (parses with `Parser.parse_each(span_marginals=p)`) |

### What the component sets

| Attribute | Value |
|---|---|
| `Span._.labels` | the constituent's labels, outermost first (a unary chain has several; a word has `()`) |
| `Span._.parse_string` | the constituent's bracketed tree; a sentence's tree has no `TOP` root |
| `Span._.constituents` | the constituent and every constituent inside it, as spans, in preorder (a generator) |
| `Span._.parent` | the smallest constituent strictly containing it; `None` for a sentence |
| `Span._.children` | its child constituents, words included, as spans (a generator) |
| `Token._.labels`, `Token._.parse_string`, `Token._.parent` | the same for the token's one-token span |
| `Token.tag_` | the parser's POS tag of each word (unless `disable_tagger`) |
| `Span._.parse_score` | a sentence's score (the log-probability of its tags); `None` for other spans |
| `Span._.parse_error` | for a sentence the parser refused, `"REASON: detail"` (see `tetra_tf.contract.sentences`); else `None` |
| `Span._.constituent_probability` | with `marginals`, a constituent's probability (that of its outermost label, see below); `None` without `marginals`, for a word without a label, a sentence's `TOP` root and any span that is no constituent |
| `Span._.tree_probability` | with `marginals`, a sentence's tree's probability among all valid trees (`ParseResult.tree_probability`); `None` for other spans and without `marginals` |
| `Span._.span_probabilities` | with `span_marginals`, a sentence's every labelled span of at least that probability, in the tree or not, as `(span, label, probability)` tuples over its tokens (`ParseResult.span_marginals`, in its order); `None` for other spans and without `span_marginals` |
| `Doc._.tetra_score` | the sum of its sentences' scores |

`parse_score`, `parse_error`, `constituent_probability`, `tree_probability`,
`span_probabilities` and `tetra_score` are tetra-tf's own; the others are benepar's.

**Marginals.** With `marginals`, each sentence is parsed with
`Parser.parse_each(marginals=True)`: the same trees, and the probability of each of their
constituents (`ParseResult.constituents`: a label over a span of words). A unary chain
(`(S (VP ...))` over the same words) is one span with several `_.labels`; its
`_.constituent_probability` is that of its outermost label, `_.labels[0]` (the chain's
inner labels' probabilities are in `ParseResult.constituents`, not on the span). A
sentence whose root is `TOP` (several children) gets `None` there: the root is in every
tree, so the parser gives it no probability. A sentence over the export's
`parse_marginals` bound (256 words) is then refused (`too_many_words`).

**Every labelled span.** With `span_marginals` (a probability `p` from 0 to 1), each
sentence is parsed with `Parser.parse_each(span_marginals=p)`: the same trees, what
`marginals` gives, and every labelled span whose probability is at least `p`, in the tree
or not (`ParseResult.span_marginals`). A sentence's `_.span_probabilities` holds them as
`(span, label, probability)`, by first word, then last word, then label; each span covers
the tokens of its words as constituents do (from its first word's token to its last
word's, whitespace tokens between them included). A sentence over 256 words is then
refused (`too_many_words`).

A span whose tokens are not one constituent raises `NonConstituentError`: reading
`_.labels`, `_.parse_string` or `_.parent` raises at once, and `_.constituents` and
`_.children` raise when iterated, as benepar's generators do. An empty span
(`doc[3:3]`) is no constituent either. Whitespace tokens at a span's edges are ignored when
matching constituents.

**Words.** Every non-whitespace token is one word (whitespace inside a token is dropped),
written as the model's training data writes it (`tetra_tf.contract.text.ptb_words`): curly quotes
become ``` `` ``` '' ` ', a straight double quote ``` `` ``` or '' by its side, Unicode
dashes --, the ellipsis character ...; so a sentence gets the tree the parse CLI and the
servers give for the same text. Brackets are escaped (`-LRB-` ...) in the tree's leaves;
the tokens' own text is unchanged. Each leaf of a tree is the spaCy token it came from.

**Errors.** A doc without sentence boundaries (`MissingSentencesError`), or a failure of the
model itself (`tetra_tf.errors.ModelError`), goes to the component's error handler
(`nlp.set_error_handler`; spaCy's default re-raises) with the docs it concerns, which are
then not yielded by `nlp.pipe`, as with spaCy's own components. A sentence the parser
refuses (too many subword pieces, or words the model cannot take) fails alone: it has no
parse (`_.labels` is `()`, `_.parse_string` `None`, `_.constituents` yields nothing), its
`_.parse_error` says why, its tokens keep their `tag_`, and the rest of the doc parses.

**Batching.** `nlp.pipe(texts, batch_size=N)` hands N docs at a time to the component, which
parses their sentences together, shortest with shortest, at most `batch_size` sentences
(the component's setting) per call of the model.

**Serialization.** The parse is stored as plain lists in `doc._.tetra_tf` (and the tags in
`token.tag_`), so parsed docs go through `DocBin(store_user_data=True)` and
`nlp.pipe(n_process=...)`.

### Differences from benepar

- **Whitespace tokens are not words.** benepar parses every token, spaces included (its
  issue 16); tetra-tf skips whitespace tokens, as every way into tetra-tf does. They are in
  no constituent, keep their `tag_`, and a span made only of them has no parse (`_.labels`
  `()`, `_.parse_string` `None`) rather than raising.
- **A sentence root with several children keeps `TOP`.** benepar's decoder forces one
  labelled root on a sentence (for treebanks like the English ones). A tetra-tagging tree
  can have a top node with several children; the component then keeps its label, `TOP`,
  in `_.labels` and `_.parse_string`, so that a sentence's `_.parse_string` is always
  one tree.
- **`_.parse_string` takes its POS tags from the parse, not from `token.tag_`.** By
  default the two agree (the component writes its tags into `tag_`, as benepar does). With
  `disable_tagger`, or after a later component changes `tag_`, benepar's `parse_string`
  would show `tag_`, while tetra-tf's stays the tree the parser produced (the tree the
  CLI and servers give).
- **The error class.** benepar raises `benepar.NonConstituentException(Exception)`;
  tetra-tf raises `NonConstituentError(ValueError)`, also importable as
  `tetra_tf.integrations.spacy_component.NonConstituentException`. tetra-tf never imports benepar
  (which imports PyTorch), so it cannot subclass benepar's class outright; but when benepar
  is already imported in the process, the error raised is also an instance of
  `benepar.NonConstituentException`, so `except benepar.NonConstituentException` keeps
  working. `except Exception` and `except ValueError` catch it always.
- **An empty span at the doc's end** (`doc[len(doc):len(doc)]`) raises
  `NonConstituentError` like any empty span; benepar raises an `IndexError` there.
- **A doc without sentence boundaries** raises `MissingSentencesError` (a `ValueError`
  naming the fix) through the error handler; benepar gets spaCy's own error from
  `doc.sents`.
- **One set of attributes per process.** The component registers the attributes with
  `force=True`, replacing benepar's if benepar set them (and importing benepar after the
  component is added fails: spaCy refuses to register an attribute twice); benepar and
  tetra-tf cannot both annotate docs in one process.
"""

from __future__ import annotations

import functools
import sys
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import nltk
from spacy.language import Language
from spacy.tokens import Doc, Span, Token
from spacy.util import minibatch, raise_error

from tetra_tf.contract import export_format, sentences
from tetra_tf.contract import text as text_lib

if TYPE_CHECKING:
    from tetra_tf.contract.parse_record import Constituent

DATA_ATTRIBUTE = "tetra_tf"
"""The Doc extension holding the parse as plain lists (`doc._.tetra_tf`)."""

_BENEPAR_EXTENSIONS_MODULE = "benepar.integrations.spacy_extensions"

ErrorHandler = Callable[[str, Any, list, Exception], Any]
"""spaCy's error handler: called as `handler(name, component, docs, error)`."""


class NonConstituentError(ValueError):
    """The span is not a constituent of the parse (benepar's NonConstituentException).

    Raised by `Span._.labels`, `_.parse_string` and `_.parent` when read, and by
    `_.constituents` and `_.children` when iterated. When benepar is imported in the
    process, the error raised is also a `benepar.NonConstituentException`.

    Example:
        ```python
        try:
            labels = doc[2:4]._.labels
        except NonConstituentError:
            labels = None
        ```
    """


NonConstituentException = NonConstituentError
"""benepar's name for `NonConstituentError`, for code ported from benepar."""


class MissingSentencesError(ValueError):
    """The doc has no sentence boundaries: add a sentencizer, senter or parser before."""


@functools.cache
def _error_class(benepar_class: type | None) -> type[NonConstituentError]:
    """NonConstituentError, or a subclass that is also benepar's exception."""
    if benepar_class is None:
        return NonConstituentError
    return type("NonConstituentError", (NonConstituentError, benepar_class),
                {"__module__": __name__, "__doc__": NonConstituentError.__doc__})


def _non_constituent(message: str) -> NonConstituentError:
    """The error to raise: also benepar's NonConstituentException if benepar is loaded
    (never imported here: it imports PyTorch)."""
    benepar = sys.modules.get(_BENEPAR_EXTENSIONS_MODULE)
    benepar_class = getattr(benepar, "NonConstituentException", None)
    if not (isinstance(benepar_class, type) and issubclass(benepar_class, Exception)):
        benepar_class = None
    return _error_class(benepar_class)(message)


# --------------------------------------------------------------------------------------
# spaCy tokens → words


def sentence_words(tokens: Iterable[Token]) -> list[str]:
    """The words the parser gets for a sentence's non-whitespace tokens.

    Args:
        tokens: the sentence's tokens, whitespace tokens left out.

    Returns:
        Each token's text with any whitespace inside it dropped, written as the model's
        training data writes it (`tetra_tf.contract.text.ptb_words`: curly quotes, straight double
        quotes by side, Unicode dashes and the ellipsis character as the treebank has
        them); spaCy's token boundaries are kept.

    Example:
        ```python
        sentence_words(nlp.make_doc('Hi \u201cthere\u201d \u2014 "you"'))
        # ['Hi', '``', 'there', "''", '--', '``', 'you', "''"]
        ```
    """
    tokens = list(tokens)
    origin = tokens[0].idx if tokens else 0
    return text_lib.ptb_words(
        ["".join(c for c in token.text if c not in sentences.WHITESPACE) for token in tokens],
        [token.idx - origin for token in tokens],
        [token.idx - origin + len(token.text) for token in tokens])


def _words_of(sentence: Span) -> list[Token]:
    return [token for token in sentence if not token.is_space]


# --------------------------------------------------------------------------------------
# The component


class TetraTfComponent:
    """The `tetra_tf` pipeline component: parses each sentence of a doc with an export.

    Made by spaCy from `nlp.add_pipe("tetra_tf", config={...})` (see the module's
    Configuration); it sets the attributes the module lists.

    Example:
        ```python
        nlp.add_pipe("tetra_tf", config={"model_dir": "models/tetra/1",
                                         "disable_tagger": True})  # keep spaCy's tags
        ```
    """

    def __init__(self, nlp: Language, name: str, model_dir: str | None = None,
                 batch_size: int | None = None, disable_tagger: bool = False,
                 marginals: bool = False, span_marginals: float | None = None):
        """Loads the export and registers the Doc/Span/Token attributes.

        Args:
            nlp: the pipeline (unused; spaCy's factory signature).
            name: the component's name in the pipeline.
            model_dir: a packaged model's name, or an export directory (`python -m
                tetra_tf.export`'s `--export_dir`); None: the packaged default model
                (`tetra_tf.packaged_models.DEFAULT_MODEL`).
            batch_size: sentences per call of the model (None:
                `tetra_tf.contract.export_format.DEFAULT_BATCH_SIZE`).
            disable_tagger: leave `token.tag_` alone instead of writing the parser's POS
                tags into it (benepar's option).
            marginals: also set `Span._.constituent_probability` and
                `Span._.tree_probability` (see the module's Marginals).
            span_marginals: a probability from 0 to 1: also set
                `Span._.span_probabilities`, and what `marginals` sets (see the module's
                Every labelled span). None: not.

        Raises:
            ValueError: batch_size is not positive, or span_marginals is no probability.
            tetra_tf.errors.ExportError: model_dir holds no usable export.
        """
        from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel

        if batch_size is None:
            batch_size = export_format.DEFAULT_BATCH_SIZE
        if batch_size < 1:
            raise ValueError(f"tetra_tf: batch_size must be positive, got {batch_size}")
        if span_marginals is not None:
            span_marginals = export_format.check_span_floor(span_marginals,
                                                            "tetra_tf: span_marginals")
        self.name = name
        """The component's name in the pipeline."""
        self.model_dir = model_dir
        """The model it parses with, as configured (None: the packaged default)."""
        self.batch_size = batch_size
        """Sentences per call of the model."""
        self.disable_tagger = disable_tagger
        """Whether `token.tag_` is left alone."""
        self.marginals = marginals
        """Whether sentences are parsed with their marginals."""
        self.span_marginals = span_marginals
        """The least probability of a sentence's labelled spans to list (None: none)."""
        self.parser = Parser(model_dir)
        """The export's `tetra_tf.parser.Parser`."""
        self.error_handler: ErrorHandler = raise_error
        """The handler `pipe` gives docs that cannot be parsed (see `set_error_handler`)."""
        install_extensions()

    def set_error_handler(self, error_handler: ErrorHandler) -> None:
        """spaCy's hook, set by `nlp.set_error_handler`.

        Args:
            error_handler: called as `error_handler(name, component, docs, error)` for docs
                that cannot be parsed (no sentence boundaries, or the model failed); those
                docs are then not yielded by `pipe`.
        """
        self.error_handler = error_handler

    def get_error_handler(self) -> ErrorHandler:
        """spaCy's hook: the error handler `pipe` uses.

        Returns:
            The handler set by `set_error_handler`, else spaCy's `raise_error`.
        """
        return self.error_handler

    def __call__(self, doc: Doc) -> Doc:
        """Parses one doc.

        Args:
            doc: a doc with sentence boundaries (or an empty doc).

        Returns:
            The same doc, parsed.

        Raises:
            MissingSentencesError: the doc has no sentence boundaries.
            tetra_tf.errors.ModelError: the model failed. (`nlp(text)` hands either error
                to the pipeline's error handler itself.)
        """
        return self._parse_docs([doc], raise_error)[0]

    def pipe(self, docs: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        """Parses the sentences of `batch_size` docs at a time together.

        Args:
            docs: the docs to parse.
            batch_size: docs per group (`nlp.pipe`'s batch_size).

        Yields:
            The parsed docs, in order; docs that cannot be parsed go to the error handler
            instead.
        """
        for docs_batch in minibatch(docs, size=batch_size):
            yield from self._parse_docs(list(docs_batch), self.error_handler)

    def _parse_docs(self, docs: list[Doc], error_handler: ErrorHandler) -> list[Doc]:
        """The docs parsed; a doc without sentences goes to error_handler alone, and all of
        them if the model itself fails."""
        from tetra_tf.parser import ModelError  # pylint: disable=import-outside-toplevel

        ready = []
        for doc in docs:
            if len(doc) and not doc.has_annotation("SENT_START"):
                error_handler(self.name, self, [doc], MissingSentencesError(
                    "tetra_tf parses sentences, but this doc has no sentence boundaries: add "
                    "a sentencizer before it (nlp.add_pipe(\"sentencizer\", before=\"tetra_tf\"))"
                    " or use a pipeline with a trained parser or senter (e.g. en_core_web_sm)"))
            else:
                ready.append(doc)
        jobs = []  # (doc index, the sentence's word tokens)
        for index, doc in enumerate(ready):
            for sentence in doc.sents if len(doc) else ():
                words = _words_of(sentence)
                if words:
                    jobs.append((index, words))
        try:
            results = self.parser.parse_each([sentence_words(words) for _, words in jobs],
                                             batch_size=self.batch_size,
                                             marginals=self.marginals,
                                             span_marginals=self.span_marginals
                                             ) if jobs else []
        except ModelError as e:
            error_handler(self.name, self, ready, e)
            return []
        data = [_empty_data(len(doc)) for doc in ready]
        for (index, words), result in zip(jobs, results):
            if isinstance(result, sentences.SentenceError):
                data[index]["refused"][f"{words[0].i}:{words[-1].i + 1}"] = str(result)
            else:
                _add_sentence(data[index], words, result.tree, result.score,
                              result.constituents, result.tree_probability,
                              result.span_marginals)
        for doc, doc_data in zip(ready, data):
            doc._.set(DATA_ATTRIBUTE, doc_data)
            if not self.disable_tagger:
                _set_tags(doc, doc_data["pos"])
        return ready


def _set_tags(doc: Doc, tags: list[str]) -> None:
    """Writes the parser's POS tags into token.tag_ (tokens it did not tag keep theirs)."""
    for token, tag in zip(doc, tags):
        if tag:
            token.tag_ = tag


# --------------------------------------------------------------------------------------
# Parse data on the doc: plain lists, constituents in preorder across all sentences


def _empty_data(num_tokens: int) -> dict[str, Any]:
    return {"starts": [], "ends": [], "labels": [], "parents": [], "subtree_ends": [],
            "index": {}, "pos": [""] * num_tokens, "words": [""] * num_tokens,
            "sentence_scores": {}, "score": 0.0, "refused": {}, "probabilities": [],
            "tree_probabilities": {}, "span_probabilities": {}}


def _add_sentence(data: dict[str, Any], words: list[Token], tree: nltk.Tree,
                  score: float, constituents: Sequence[Constituent] | None = None,
                  tree_probability: float | None = None,
                  spans: Sequence[Constituent] | None = None) -> None:
    """Appends a sentence's constituents (TOP dropped; unary chains merged) to `data`.

    Args:
        data: the doc's parse data (`_empty_data`).
        words: the sentence's word tokens, one per leaf.
        tree: its tree (`ParseResult.tree`).
        score: its score.
        constituents: its constituents with their probabilities
            (`ParseResult.constituents`); each position gets its outermost label's. None:
            no marginals.
        tree_probability: its tree's probability (with marginals).
        spans: its labelled spans (`ParseResult.span_marginals`), kept as [first token,
            end token, label, probability] lists over the same tokens as constituents.
            None: not asked for.
    """
    token_indices = [token.i for token in words]
    word_counts = _word_counts(tree)
    first = len(data["starts"])
    probabilities = (None if constituents is None else
                     {(c.label, c.start, c.end): c.probability for c in constituents})
    # Explicit stack (no recursion: long sentences make deep trees). Entries: node, labels
    # gathered so far, parent position, first word index. TOP's label is kept only when the
    # sentence's top node is unlabeled (TOP has several children), so that it stays a tree.
    root_labels = [tree.label()] if len(tree) > 1 else []
    stack: list[tuple[Any, list[str], int, int]] = [(tree, root_labels, -1, 0)]
    while stack:
        node, labels, parent, word = stack.pop()
        # A unary chain, down to a word's preterminal, is one constituent with several labels.
        while _is_phrase(node) and len(node) == 1:
            node = node[0]
            if _is_phrase(node):
                labels = labels + [node.label()]
        position = len(data["starts"])
        data["starts"].append(token_indices[word])
        data["labels"].append(labels)
        data["parents"].append(parent)
        data["subtree_ends"].append(None)
        if _is_phrase(node):
            children, last = [], word
            for child in node:
                children.append((child, [child.label()] if _is_phrase(child) else [],
                                 position, last))
                last += word_counts[id(child)] if isinstance(child, nltk.Tree) else 1
            last -= 1
            stack.extend(reversed(children))
        else:  # a preterminal: (POS word)
            last = word
            data["pos"][token_indices[word]] = node.label()
            data["words"][token_indices[word]] = node[0]
        data["ends"].append(token_indices[last] + 1)
        # TOP (the root over several children) is no constituent: None.
        data["probabilities"].append(None if probabilities is None or not labels
                                     else probabilities.get((labels[0], word, last)))
    # Subtree ends (preorder: a subtree is its position up to the next non-descendant).
    for position in range(len(data["starts"]) - 1, first - 1, -1):
        data["subtree_ends"][position] = data["subtree_ends"][position] or position + 1
        parent = data["parents"][position]
        if parent >= 0:
            data["subtree_ends"][parent] = max(data["subtree_ends"][parent] or 0,
                                               data["subtree_ends"][position])
    for position in range(first, len(data["starts"])):
        data["index"][f"{data['starts'][position]}:{data['ends'][position]}"] = position
    data["sentence_scores"][str(first)] = score
    data["score"] += score
    if tree_probability is not None:
        data["tree_probabilities"][str(first)] = tree_probability
    if spans is not None:
        data["span_probabilities"][str(first)] = [
            [token_indices[c.start], token_indices[c.end] + 1, c.label, c.probability]
            for c in spans]


def _is_phrase(node) -> bool:
    """A node above a preterminal (a preterminal's only child is a word string)."""
    return isinstance(node, nltk.Tree) and not (len(node) == 1 and isinstance(node[0], str))


def _word_counts(tree: nltk.Tree) -> dict[int, int]:
    """Words under each subtree, keyed by id(subtree): one pass, no recursion."""
    counts: dict[int, int] = {}
    stack: list[tuple[nltk.Tree, bool]] = [(tree, False)]
    while stack:
        node, children_counted = stack.pop()
        if children_counted:
            counts[id(node)] = sum(counts[id(child)] if isinstance(child, nltk.Tree) else 1
                                   for child in node)
        else:
            stack.append((node, True))
            stack.extend((child, False) for child in node if isinstance(child, nltk.Tree))
    return counts


# --------------------------------------------------------------------------------------
# Extension getters


def _data(doc: Doc) -> dict[str, Any]:
    """The doc's parse data; ValueError naming the fix if the doc was not parsed."""
    data = doc._.get(DATA_ATTRIBUTE)
    if data is None:
        raise ValueError("this doc has no constituency parse: add the tetra_tf component to "
                         "the pipeline (nlp.add_pipe(\"tetra_tf\"))")
    return data


def _trimmed(span: Span) -> tuple[int, int] | None:
    """The span's start and end without whitespace tokens at its edges (None: all space)."""
    start, end = span.start, span.end
    doc = span.doc
    while start < end and doc[start].is_space:
        start += 1
    while end > start and doc[end - 1].is_space:
        end -= 1
    return (start, end) if start < end else None


def _position(span: Span, required: bool = True) -> int | None:
    """The span's constituent position; None for an all-whitespace span or one in a refused
    sentence. An empty span, or one that is no constituent, is None unless `required`
    (then NonConstituentError)."""
    data = _data(span.doc)
    if span.start == span.end:
        if required:
            raise _non_constituent(f"an empty span is not a constituent (tokens "
                                   f"{span.start}:{span.end})")
        return None
    bounds = _trimmed(span)
    if bounds is None or _refusal(span, bounds) is not None:
        return None
    position = data["index"].get(f"{bounds[0]}:{bounds[1]}")
    if position is None and required:
        raise _non_constituent(f"span is not a constituent: {span.text!r}")
    return position


def _refusal(span: Span, bounds: tuple[int, int] | None = None) -> str | None:
    """Why the parser refused the sentence this span lies in; None if it did not."""
    bounds = bounds or _trimmed(span)
    if bounds is None:
        return None
    for key, error in _data(span.doc)["refused"].items():
        start, end = map(int, key.split(":"))
        if start <= bounds[0] and bounds[1] <= end:
            return error
    return None


def _span(doc: Doc, position: int) -> Span:
    data = _data(doc)
    return doc[data["starts"][position]:data["ends"][position]]


def _child_positions(data: dict[str, Any], position: int) -> Iterator[int]:
    child = position + 1
    while child < data["subtree_ends"][position]:
        yield child
        child = data["subtree_ends"][child]


def get_parse_error(span: Span) -> str | None:
    """`Span._.parse_error`: why the parser refused the sentence the span lies in.

    Args:
        span: any span of a parsed doc.

    Returns:
        `"REASON: detail"` (a reason code of `tetra_tf.contract.sentences`, e.g.
        `"too_many_pieces: ..."`) if the span lies in a refused sentence, else None.

    Raises:
        ValueError: the doc was not parsed by the component.
    """
    return _refusal(span)


def get_labels(span: Span) -> tuple[str, ...]:
    """`Span._.labels` (and `Token._.labels`): the constituent's labels.

    Args:
        span: a constituent of a parsed doc.

    Returns:
        Its labels, outermost first (a unary chain has several); `()` for a word, and for
        a span with no parse (whitespace only, or in a refused sentence).

    Raises:
        NonConstituentError: the span is empty or not a constituent.
        ValueError: the doc was not parsed by the component.

    Example:
        ```python
        sent._.labels                      # ("S",)
        list(sent._.children)[0]._.labels  # ("NP",)
        ```
    """
    position = _position(span)
    return () if position is None else tuple(_data(span.doc)["labels"][position])


def get_parse_string(span: Span) -> str | None:
    """`Span._.parse_string` (and `Token._.parse_string`): the constituent's tree.

    Args:
        span: a constituent of a parsed doc.

    Returns:
        Its bracketed tree, with the parser's POS tags and the tokens' texts as leaves
        (brackets escaped, e.g. `-LRB-`); a sentence's tree without its `TOP` root, unless
        the root has several children. None for a span with no parse.

    Raises:
        NonConstituentError: the span is empty or not a constituent.
        ValueError: the doc was not parsed by the component.

    Example:
        ```python
        doc[0:2]._.parse_string  # "(NP (DT The) (NN time))"
        ```
    """
    position = _position(span)
    if position is None:
        return None
    data = _data(span.doc)
    pieces: list[str] = []

    def add(piece: str) -> None:
        if piece:
            pieces.append(piece)

    # Items: a position to write, or a closing string to write after its subtree.
    stack: list[Any] = [position]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            add(item)
            continue
        labels = data["labels"][item]
        if pieces and pieces[-1][-1] not in " (":
            add(" ")
        add("".join(f"({label} " for label in labels))
        children = list(_child_positions(data, item))
        if not children:  # a word
            token = data["starts"][item]
            add(f"({data['pos'][token]} {data['words'][token]})")
            add(")" * len(labels))
            continue
        stack.append(")" * len(labels))
        stack.extend(reversed(children))
    return "".join(pieces)


def get_constituents(span: Span) -> Iterator[Span]:
    """`Span._.constituents`: the constituent and every constituent inside it.

    A generator, as benepar's: the span is checked when iteration starts.

    Args:
        span: a constituent of a parsed doc.

    Yields:
        Spans in preorder, the span's own constituent first, words included; nothing for
        a span with no parse.

    Raises:
        NonConstituentError: (on iteration) the span is empty or not a constituent.
        ValueError: (on iteration) the doc was not parsed by the component.

    Example:
        ```python
        [c._.labels for c in sent._.constituents]  # [("S",), ("NP",), ("NP",), (), ...]
        ```
    """
    position = _position(span)
    if position is None:
        return
    data = _data(span.doc)
    for constituent in range(position, data["subtree_ends"][position]):
        yield _span(span.doc, constituent)


def get_children(span: Span) -> Iterator[Span]:
    """`Span._.children`: the constituent's child constituents.

    A generator, as benepar's: the span is checked when iteration starts.

    Args:
        span: a constituent of a parsed doc.

    Yields:
        Its children as spans, left to right, words included; nothing for a word or a
        span with no parse.

    Raises:
        NonConstituentError: (on iteration) the span is empty or not a constituent.
        ValueError: (on iteration) the doc was not parsed by the component.

    Example:
        ```python
        list(sent._.children)  # [The time for action, is now, .]
        ```
    """
    position = _position(span)
    if position is None:
        return
    data = _data(span.doc)
    for child in _child_positions(data, position):
        yield _span(span.doc, child)


def get_parent(span: Span) -> Span | None:
    """`Span._.parent` (and `Token._.parent`): the smallest constituent strictly around it.

    Args:
        span: a constituent of a parsed doc.

    Returns:
        The parent constituent's span; None for a sentence's root and for a span with no
        parse.

    Raises:
        NonConstituentError: the span is empty or not a constituent.
        ValueError: the doc was not parsed by the component.
    """
    position = _position(span)
    if position is None:
        return None
    parent = _data(span.doc)["parents"][position]
    return None if parent < 0 else _span(span.doc, parent)


def get_parse_score(span: Span) -> float | None:
    """`Span._.parse_score`: a sentence's score.

    Args:
        span: any span of a parsed doc.

    Returns:
        The log-probability of the sentence's tags (at most 0) if the span is a parsed
        sentence's root constituent; else None (never raises NonConstituentError).

    Raises:
        ValueError: the doc was not parsed by the component.
    """
    return _sentence_value(span, "sentence_scores")


def get_constituent_probability(span: Span) -> float | None:
    """`Span._.constituent_probability`: a constituent's probability (with marginals).

    Args:
        span: any span of a parsed doc.

    Returns:
        With the component's `marginals`, the probability of the span's constituent:
        that of its outermost label (`_.labels[0]`) over its words, under the model
        (`tetra_tf.contract.parse_record.Constituent`). None without marginals, for a word without a
        label, a sentence's `TOP` root, a span with no parse and a span that is no
        constituent (never raises NonConstituentError).

    Raises:
        ValueError: the doc was not parsed by the component.

    Example:
        ```python
        for constituent in sent._.constituents:  # with config {"marginals": True, ...}
            print(constituent._.labels, constituent._.constituent_probability)
        ```
    """
    position = _position(span, required=False)
    if position is None:
        return None
    probabilities = _data(span.doc).get("probabilities")  # none in data of older versions
    return None if probabilities is None else probabilities[position]


def get_tree_probability(span: Span) -> float | None:
    """`Span._.tree_probability`: a sentence's tree's probability (with marginals).

    Args:
        span: any span of a parsed doc.

    Returns:
        With the component's `marginals`, the probability of the sentence's tree among
        all valid trees (`ParseResult.tree_probability`) if the span is a parsed
        sentence's root constituent; else None (never raises NonConstituentError).

    Raises:
        ValueError: the doc was not parsed by the component.
    """
    return _sentence_value(span, "tree_probabilities")


def get_span_probabilities(span: Span) -> tuple[tuple[Span, str, float], ...] | None:
    """`Span._.span_probabilities`: a sentence's labelled spans (with span_marginals).

    Args:
        span: any span of a parsed doc.

    Returns:
        With the component's `span_marginals` (p), if the span is a parsed sentence's
        root constituent: every labelled span of the sentence, in its tree or not, whose
        probability is at least p, as `(span, label, probability)` over the doc's tokens,
        by first word, then last word, then label (`ParseResult.span_marginals`). Else
        None (never raises NonConstituentError).

    Raises:
        ValueError: the doc was not parsed by the component.

    Example:
        ```python
        for span, label, probability in sent._.span_probabilities:  # span_marginals: 0.1
            print(span.text, label, round(probability, 3))
        ```
    """
    spans = _sentence_value(span, "span_probabilities")
    if spans is None:
        return None
    return tuple((span.doc[start:end], label, probability)
                 for start, end, label, probability in spans)


def _sentence_value(span: Span, key: str) -> Any:
    """data[key]'s entry for the span if it is a parsed sentence's root constituent, else
    None (also for data of older versions without the key)."""
    position = _position(span, required=False)
    data = _data(span.doc)
    if position is None or data["parents"][position] >= 0:
        return None
    return data.get(key, {}).get(str(position))


def get_doc_score(doc: Doc) -> float | None:
    """`Doc._.tetra_score`: the sum of the doc's sentences' scores.

    Args:
        doc: any doc.

    Returns:
        The sum of `_.parse_score` over its parsed sentences (0.0 for an empty doc); None
        if the component did not parse the doc.
    """
    data = doc._.get(DATA_ATTRIBUTE)
    return None if data is None else data["score"]


def _one(getter: Callable[[Span], Any]) -> Callable[[Token], Any]:
    """The Token getter: `getter` on the token's one-token span."""
    return lambda token: getter(token.doc[token.i:token.i + 1])


def install_extensions() -> None:
    """Registers the Doc, Span and Token attributes the module lists.

    Called by the component; registering replaces benepar's attributes of the same names
    (`force=True`). Does nothing if they are registered already.
    """
    if Doc.has_extension(DATA_ATTRIBUTE) and Span.has_extension("span_probabilities"):
        return
    Doc.set_extension(DATA_ATTRIBUTE, default=None, force=True)
    Doc.set_extension("tetra_score", getter=get_doc_score, force=True)
    for name, getter in (("labels", get_labels), ("parse_string", get_parse_string),
                         ("constituents", get_constituents), ("parent", get_parent),
                         ("children", get_children), ("parse_score", get_parse_score),
                         ("parse_error", get_parse_error),
                         ("constituent_probability", get_constituent_probability),
                         ("tree_probability", get_tree_probability),
                         ("span_probabilities", get_span_probabilities)):
        Span.set_extension(name, getter=getter, force=True)
    for name, getter in (("labels", get_labels), ("parse_string", get_parse_string),
                         ("parent", get_parent)):
        Token.set_extension(name, getter=_one(getter), force=True)
