"""A spaCy v3 pipeline component: constituency trees on sentence spans, as benepar gives.

  import spacy
  nlp = spacy.load("en_core_web_sm")          # or spacy.blank("en") + nlp.add_pipe("sentencizer")
  nlp.add_pipe("tetra_tf", config={"model_dir": "models/tetra/1"})
  doc = nlp("The time for action is now. It is never too late to do something.")
  sent = next(doc.sents)
  sent._.parse_string   # "(S (NP (NP (DT The) (NN time)) ...) (. .))"
  sent._.labels         # ("S",)
  list(sent._.children) # [The time for action, is now, .]

The factory is registered through the ``spacy_factories`` entry point (setup.py), by the
top-level module tetra_tf_spacy.py, so ``nlp.add_pipe("tetra_tf")`` works without importing
tetra_tf first (and spaCy, which imports every factory's module, never imports tetra_tf
unless the component is used).

Attributes (benepar's names):
  Span._.labels          labels of the constituent (a unary chain is several, outermost first;
                         () for a word with only its POS tag)
  Span._.parse_string    the constituent's bracketed tree (POS tags from the parser, PTB
                         tokens as leaves); for a sentence, its tree without the TOP root
                         (kept only when TOP has several children)
  Span._.constituents    the constituent and all below it, as spans, in preorder
  Span._.parent          the smallest constituent strictly containing it (None for the root)
  Span._.children        its child constituents, words included, as spans
  Span._.parse_score     a sentence span's score (log-probability of its tags), else None
  Token._.labels, Token._.parse_string, Token._.parent   the same for one-token spans
  Doc._.tetra_score      the sum of its sentences' scores
  Span._.parse_error     for a sentence the parser refused: "REASON: detail" (the sentence
                         contract's reason codes, tetra_tf/sentences.py), else None
A span that is not a constituent raises `NonConstituentError` (as benepar does); spans made
only of whitespace tokens, and the sentences the parser refused (too many subword pieces,
or words the model cannot take), have no parse (labels (), parse_string None); the rest of
the doc and the batch parse as usual. Whitespace at a span's edges is ignored when matching
constituents.

Words: each non-whitespace token's text is a word, as the sentence contract takes words
from every way in (whitespace tokens are skipped; whitespace inside a token is dropped), so
a sentence gets the tree its words get from the parse CLI or the servers: brackets are
escaped only in the tree's leaves (-LRB- ...). Each tree leaf is the spaCy token it came
from.

Errors: a doc without sentence boundaries, or a failure of the model itself, goes to the
component's error handler (``nlp.set_error_handler``; spaCy's default re-raises), with the
docs it concerns, which are then not yielded, as spaCy's own components do.

Batching: `nlp.pipe(texts, batch_size=N)` hands N docs at a time to the component, whose
sentences are parsed together, shortest with shortest, at most `batch_size` sentences (the
component's setting) per call of the SavedModel.

All data is stored as plain lists in ``doc._.tetra_tf``, so docs serialize (DocBin,
``nlp.pipe(n_process=...)``).
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator


import nltk
from spacy.language import Language
from spacy.tokens import Doc, Span, Token
from spacy.util import minibatch

from spacy.util import raise_error

from tetra_tf import sentences

DATA_ATTRIBUTE = "tetra_tf"


class NonConstituentError(ValueError):
    """The span is not a constituent of the parse."""


class MissingSentencesError(ValueError):
    """The doc has no sentence boundaries."""


# --------------------------------------------------------------------------------------
# spaCy tokens → words


def sentence_words(tokens: Iterable[Token]) -> list[str]:
    """The words of a sentence's non-whitespace spaCy tokens (see the module docstring)."""
    return ["".join(c for c in token.text if c not in sentences.WHITESPACE) for token in tokens]


def _words_of(sentence: Span) -> list[Token]:
    return [token for token in sentence if not token.is_space]


# --------------------------------------------------------------------------------------
# The component


class TetraTfComponent:
    """Parses each sentence of a doc with an exported tetra-tf SavedModel."""

    def __init__(self, nlp: Language, name: str, model_dir: str, batch_size: int):
        from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel

        if batch_size < 1:
            raise ValueError(f"tetra_tf: batch_size must be positive, got {batch_size}")
        self.name = name
        self.model_dir = model_dir
        self.batch_size = batch_size
        self.parser = Parser(model_dir)
        self.error_handler = raise_error
        install_extensions()

    def set_error_handler(self, error_handler) -> None:
        """spaCy's hook (nlp.set_error_handler): called with (name, component, docs, error)
        for docs that cannot be parsed."""
        self.error_handler = error_handler

    def get_error_handler(self):
        return self.error_handler

    def __call__(self, doc: Doc) -> Doc:
        """Parses one doc; a doc that cannot be parsed raises (`nlp(text)` hands the error to
        the pipeline's error handler itself)."""
        return self._parse_docs([doc], raise_error)[0]

    def pipe(self, docs: Iterable[Doc], batch_size: int = 128) -> Iterator[Doc]:
        """Parses the sentences of `batch_size` docs at a time together."""
        for docs_batch in minibatch(docs, size=batch_size):
            yield from self._parse_docs(list(docs_batch), self.error_handler)

    def _parse_docs(self, docs: list[Doc], error_handler) -> list[Doc]:
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
                                             batch_size=self.batch_size) if jobs else []
        except ModelError as e:
            error_handler(self.name, self, ready, e)
            return []
        data = [_empty_data(len(doc)) for doc in ready]
        for (index, words), result in zip(jobs, results):
            if isinstance(result, sentences.SentenceError):
                data[index]["refused"][f"{words[0].i}:{words[-1].i + 1}"] = str(result)
            else:
                _add_sentence(data[index], words, result.tree, result.score)
        for doc, doc_data in zip(ready, data):
            doc._.set(DATA_ATTRIBUTE, doc_data)
        return ready


# --------------------------------------------------------------------------------------
# Parse data on the doc: plain lists, constituents in preorder across all sentences


def _empty_data(num_tokens: int) -> dict[str, Any]:
    return {"starts": [], "ends": [], "labels": [], "parents": [], "subtree_ends": [],
            "index": {}, "pos": [""] * num_tokens, "words": [""] * num_tokens,
            "sentence_scores": {}, "score": 0.0, "refused": {}}


def _add_sentence(data: dict[str, Any], words: list[Token], tree: nltk.Tree,
                  score: float) -> None:
    """Appends a sentence's constituents (TOP dropped; unary chains merged) to `data`."""
    token_indices = [token.i for token in words]
    word_counts = _word_counts(tree)
    first = len(data["starts"])
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
        data["ends"].append(token_indices[word] + 1)
        data["subtree_ends"].append(None)
        if not _is_phrase(node):  # a preterminal: (POS word)
            data["pos"][token_indices[word]] = node.label()
            data["words"][token_indices[word]] = node[0]
            continue
        children, offset = [], word
        for child in node:
            children.append((child, [child.label()] if _is_phrase(child) else [], position,
                             offset))
            offset += word_counts[id(child)] if isinstance(child, nltk.Tree) else 1
        data["ends"][position] = token_indices[offset - 1] + 1
        stack.extend(reversed(children))
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
    data = doc._.get(DATA_ATTRIBUTE)
    if data is None:
        raise ValueError("this doc has no constituency parse: add the tetra_tf component to "
                         "the pipeline (nlp.add_pipe(\"tetra_tf\", config={\"model_dir\": ...}))")
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
    """The span's constituent position; None for an all-whitespace span, and for a span
    that is not a constituent unless `required` (then NonConstituentError)."""
    bounds = _trimmed(span)
    if bounds is None or _refusal(span, bounds) is not None:
        return None
    position = _data(span.doc)["index"].get(f"{bounds[0]}:{bounds[1]}")
    if position is None and required:
        raise NonConstituentError(f"span is not a constituent: {span.text!r}")
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


def get_parse_error(span: Span) -> str | None:
    return _refusal(span)


def _span(doc: Doc, position: int) -> Span:
    data = _data(doc)
    return doc[data["starts"][position]:data["ends"][position]]


def get_labels(span: Span) -> tuple[str, ...]:
    position = _position(span)
    return () if position is None else tuple(_data(span.doc)["labels"][position])


def get_parse_string(span: Span) -> str | None:
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


def _child_positions(data: dict[str, Any], position: int) -> Iterator[int]:
    child = position + 1
    while child < data["subtree_ends"][position]:
        yield child
        child = data["subtree_ends"][child]


def get_constituents(span: Span) -> Iterator[Span]:
    position = _position(span)
    if position is None:
        return iter(())
    data = _data(span.doc)
    return (_span(span.doc, p) for p in range(position, data["subtree_ends"][position]))


def get_children(span: Span) -> Iterator[Span]:
    position = _position(span)
    if position is None:
        return iter(())
    return (_span(span.doc, p) for p in _child_positions(_data(span.doc), position))


def get_parent(span: Span) -> Span | None:
    position = _position(span)
    if position is None:
        return None
    parent = _data(span.doc)["parents"][position]
    return None if parent < 0 else _span(span.doc, parent)


def get_parse_score(span: Span) -> float | None:
    position = _position(span, required=False)
    data = _data(span.doc)
    if position is None or data["parents"][position] >= 0:
        return None
    return data["sentence_scores"].get(str(position))


def get_doc_score(doc: Doc) -> float | None:
    data = doc._.get(DATA_ATTRIBUTE)
    return None if data is None else data["score"]


def _one(getter):
    return lambda token: getter(token.doc[token.i:token.i + 1])


def install_extensions() -> None:
    """Registers the Doc/Span/Token extensions (replacing benepar's if it set them)."""
    if Doc.has_extension(DATA_ATTRIBUTE) and Span.has_extension("parse_error"):
        return
    Doc.set_extension(DATA_ATTRIBUTE, default=None, force=True)
    Doc.set_extension("tetra_score", getter=get_doc_score, force=True)
    for name, getter in (("labels", get_labels), ("parse_string", get_parse_string),
                         ("constituents", get_constituents), ("parent", get_parent),
                         ("children", get_children), ("parse_score", get_parse_score),
                         ("parse_error", get_parse_error)):
        Span.set_extension(name, getter=getter, force=True)
    for name, getter in (("labels", get_labels), ("parse_string", get_parse_string),
                         ("parent", get_parent)):
        Token.set_extension(name, getter=_one(getter), force=True)
