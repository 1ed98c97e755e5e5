"""One sentence's parse (or refusal): the result types every way in gives, and their JSON
object, the one owner of its field names.

`Parser` returns a `ParseResult` per sentence (its `Constituent`s with their
probabilities) and a `TextSentence` per sentence of a raw text; they live here, below the
parser, so that the programs, Beam and Spark read and write them without TensorFlow.
`ParseResult.to_dict`, `TextSentence.to_dict`, the parse command's ``--output_format=json``
and the page of the server build their objects here; Beam's records and Spark's columns
take their names (and, for the fields they carry, their values) from here too, so that a
field means the same thing wherever it is read. No TensorFlow here.

Fields, each only where it applies:

* ``line``: the input line's number (from 1; the command, Beam and Spark);
  ``sentence_number``: the sentence's number in its line or text (from 1; raw text);
* ``start``, ``end``: the sentence's character offsets in its line or text (raw text);
* ``words``: the sentence's words, PTB tokens as the model read them; ``word_starts``,
  ``word_ends``: each word's character offsets in the line or text (raw text:
  ``text[word_starts[i]:word_ends[i]]`` is what was written);
* ``pos_tags``: the predicted part of speech of each word;
* ``tree``: the one-line bracketed tree, ``(TOP (S ...))``;
* ``score``: the log-probability of the tree's tags (≤ 0);
* with marginals: ``tree_probability``; ``constituent_marginals``, each constituent's
  probability in the order the tree opens their brackets (as Beam and Spark give them); and
  ``constituents``, the same constituents spelled out, ``[{"label", "start", "end",
  "probability"}, ...]`` (start and end: first and last word, 0-based, inclusive);
* with span marginals: ``span_marginals``, every labelled span of at least the floor,
  ``[{"label", "start", "end", "probability"}, ...]`` by start, end, label;
* with k best trees: ``k_best``, ``[{"tree", "score"}, ...]``, best first;
* for a refused sentence or line, instead of the parse: ``reason`` (a reason code of
  `tetra_tf.contract.sentences`) and ``error`` (``"REASON: DETAIL"``, as the command prints it).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import html
import json
import math
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from tetra_tf.contract import text as text_lib
from tetra_tf.contract.sentences import SentenceError

if TYPE_CHECKING:
    import nltk

FILE, LINE, SENTENCE_NUMBER = "file", "line", "sentence_number"
START, END = "start", "end"
WORDS, WORD_STARTS, WORD_ENDS, POS_TAGS = "words", "word_starts", "word_ends", "pos_tags"
TREE, SCORE = "tree", "score"
TREE_PROBABILITY, CONSTITUENT_MARGINALS = "tree_probability", "constituent_marginals"
CONSTITUENTS, SPAN_MARGINALS, K_BEST = "constituents", "span_marginals", "k_best"
REASON, ERROR = "reason", "error"
# The fields of a parse that Beam's records and Spark's rows carry, in their order.
BULK_FIELDS = (TREE, SCORE, TREE_PROBABILITY, CONSTITUENT_MARGINALS, SPAN_MARGINALS)


@dataclasses.dataclass(frozen=True)
class Constituent:
    """One constituent of a parse and how sure the model is of it.

    Attributes:
      label: its label (``NP``; each label of a unary chain is a constituent of its own).
      start, end: its first and last word (0-based, inclusive).
      probability: the posterior probability that the sentence has a constituent with
        this label over these words, under the model's tag distribution restricted to
        valid trees (`tetra_tf.decode.marginals`).
    """

    label: str
    start: int
    end: int
    probability: float


@dataclasses.dataclass(frozen=True)
class ParseResult:
    """One sentence's parse: the SavedModel's tree string, its score and tags.

    Attributes:
      bracketed: the one-line tree, ``(TOP (S ...))``: the predicted POS tags on the
        leaves, words with brackets PTB-escaped (`sentences.escape_leaf`).
      score: log-probability of the chosen leaf and internal tags under the model (the
        decoder's objective; ≤ 0, higher is more confident; POS tags not included).
      pos_tags, leaf_tags: one per word.
      internal_tags: one per fencepost between words (n − 1).
      tree_probability: with ``marginals=True``, the probability of the tag sequence that
        builds this tree among all valid ones (exp(score) over their sum): the tree's own,
        unless another binarization of its n-ary nodes also has some (then a lower bound);
        else None.
      constituent_marginals: with ``marginals=True``, each constituent's probability, in
        the order of `constituents`; else None.
      k_best: with ``k_best=True``, the best trees (bracketed) and their scores, best
        first (the first is `bracketed`; at most the export's K, fewer when the sentence
        has fewer valid tag sequences; two tag sequences may give one tree); else None.
      span_marginals: with ``span_marginals=p``, every labelled span (in the tree or
        not) whose probability is at least p and above 0, by first word, then last word,
        then label; else None.
      words: the words the model read, as given (PTB tokens; None for a result made
        without them).

    A result shows itself as a drawing in Jupyter (`_repr_svg_`); `to_svg` gives the
    drawing, `to_dict` and `to_json` the JSON object every way in writes
    (`tetra_tf.contract.parse_record`).

    Example:
        ```python
        result = parser.parse_each([["Hello", "!"]])[0]
        result.bracketed   # '(TOP (ADVP (INTJ (NN Hello)) (. !)))'
        result.score       # -4.4551...
        result.pos_tags    # ['RB', '.']
        result.tree        # the same tree as an nltk.Tree
        ```
    """

    bracketed: str
    score: float
    pos_tags: list[str]
    leaf_tags: list[str]
    internal_tags: list[str]
    tree_probability: float | None = None
    constituent_marginals: tuple[float, ...] | None = None
    k_best: tuple[tuple[str, float], ...] | None = None
    span_marginals: tuple[Constituent, ...] | None = None
    words: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The parse as a JSON object: words, pos_tags, tree, score, and the marginals,
        spans or k best trees it was parsed with (fields: `tetra_tf.contract.parse_record`)."""
        return result_fields(self)

    def to_json(self) -> str:
        """`to_dict` as one line of JSON (UTF-8 text, not ASCII-escaped)."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def to_svg(self, words: Sequence[str] | None = None) -> str:
        """The tree drawn as an SVG document (`tetra_tf.trees.drawing.tree_svg`): each
        constituent's probability as a number and a shade when parsed with marginals.

        Args:
          words: the words to write under the tree (default: `words`, else the tree's
            leaves), e.g. as they were written in a raw text.
        """
        from tetra_tf.trees import drawing  # pylint: disable=import-outside-toplevel

        return drawing.tree_svg(self.bracketed, words if words is not None else self.words,
                                self.constituent_marginals)

    def _repr_svg_(self) -> str:
        """Jupyter's drawing of the result."""
        return self.to_svg()

    @functools.cached_property
    def constituents(self) -> list[Constituent] | None:
        """Each bracket of the tree but the root's and the parts of speech', in the order
        the tree string opens them, with its probability; None unless parsed with
        ``marginals=True``. Read from the tree when first asked for."""
        if self.constituent_marginals is None:
            return None
        spans = _preorder_spans(self.tree)
        return [Constituent(label, start, end, probability) for (label, start, end),
                probability in zip(spans, self.constituent_marginals, strict=True)]

    @functools.cached_property
    def tree(self) -> nltk.Tree:
        """The tree as an nltk.Tree, read from `bracketed` when first asked for."""
        # nltk is imported here, when a tree is first asked for: the programs that write
        # bracketed strings (the CLI, Beam, Spark) start without it.
        from tetra_tf.trees import treebank  # pylint: disable=import-outside-toplevel

        return treebank.parse_tree(self.bracketed)


@dataclasses.dataclass(frozen=True)
class TextSentence(text_lib.Sentence):
    """One sentence of a raw text and its parse (`Parser.parse_text`).

    Attributes:
      start, end: its character offsets in the text (``text[start:end]``; the whitespace
        after a sentence is its own).
      tokens: its PTB tokens (`tetra_tf.contract.text.Token`: word, start, end), with character
        offsets in the whole text: ``text[token.start:token.end]`` is what was written.
      result: its ParseResult (one leaf per token, in order), or the SentenceError that
        refuses it (e.g. ``too_many_words``).
      written: each token as it was written in the text (``text[token.start:token.end]``;
        empty for a sentence made without its text).

    A sentence shows itself in Jupyter (`_repr_html_`: its drawing with the words as
    written, or its refusal); `to_svg` gives the drawing, `to_dict` and `to_json` the
    JSON object (`tetra_tf.contract.parse_record`).

    Example:
        ```python
        sentence = parser.parse_text("He left (early).")[0]
        sentence.words            # ['He', 'left', '-LRB-', 'early', '-RRB-', '.']
        sentence.tokens[2]        # Token(word='-LRB-', start=8, end=9)
        sentence.result.bracketed # '(TOP (S (NP (PRP He)) (VP (VBD left) ...'
        ```
    """

    result: ParseResult | SentenceError
    written: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The sentence as a JSON object: start, end, words, word_starts, word_ends, then
        its parse's fields (`ParseResult.to_dict`) or its refusal's (reason, error)."""
        return {START: self.start, END: self.end,
                WORDS: self.words,
                WORD_STARTS: [token.start for token in self.tokens],
                WORD_ENDS: [token.end for token in self.tokens],
                **outcome_fields(self.result)}

    def to_json(self) -> str:
        """`to_dict` as one line of JSON (UTF-8 text, not ASCII-escaped)."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def to_svg(self) -> str:
        """The sentence's tree drawn as SVG (`ParseResult.to_svg`), its words as written.

        Raises:
          SentenceError: the sentence was refused (it has no tree).
        """
        if isinstance(self.result, SentenceError):
            raise self.result
        return self.result.to_svg(self.written or None)

    def _repr_html_(self) -> str:
        """Jupyter's view: the drawing, or the refusal's reason (escaped)."""
        if isinstance(self.result, SentenceError):
            return f"<p>refused: {html.escape(str(self.result))}</p>"
        return self.to_svg()


def span_records(spans: Iterable[Constituent]) -> list[dict[str, Any]]:
    """Labelled spans (`Constituent`s) as JSON objects.

    Returns:
      ``[{"label": str, "start": int, "end": int, "probability": float}, ...]`` in the
      order given (start and end: the first and last word, 0-based, inclusive).
    """
    return [dataclasses.asdict(span) for span in spans]


def result_fields(result: ParseResult) -> dict[str, Any]:
    """A parse's fields: words (when the result knows them), pos_tags, tree, score, and
    the marginals, spans or k best trees it was parsed with (see the module doc)."""
    fields: dict[str, Any] = {}
    if result.words is not None:
        fields[WORDS] = list(result.words)
    fields[POS_TAGS] = list(result.pos_tags)
    fields.update(_parse_fields(result, spelled_out=True))
    if result.k_best is not None:
        fields[K_BEST] = [{TREE: tree, SCORE: score} for tree, score in result.k_best]
    return fields


def _parse_fields(result: ParseResult, spelled_out: bool) -> dict[str, Any]:
    """tree, score, and the marginals (with `spelled_out`, the constituents too, read from
    the tree) and spans the result was parsed with."""
    fields: dict[str, Any] = {TREE: result.bracketed, SCORE: result.score}
    if result.constituent_marginals is not None:
        fields.update({TREE_PROBABILITY: result.tree_probability,
                       CONSTITUENT_MARGINALS: list(result.constituent_marginals)})
        if spelled_out:
            fields[CONSTITUENTS] = span_records(result.constituents)
    if result.span_marginals is not None:
        fields[SPAN_MARGINALS] = span_records(result.span_marginals)
    return fields


def error_fields(error: SentenceError) -> dict[str, str]:
    """A refusal's fields: ``{"reason": REASON, "error": "REASON: DETAIL"}``."""
    return {REASON: error.reason, ERROR: str(error)}


def outcome_fields(outcome: ParseResult | SentenceError) -> dict[str, Any]:
    """`error_fields` for a SentenceError, else `result_fields`."""
    if isinstance(outcome, SentenceError):
        return error_fields(outcome)
    return result_fields(outcome)


def bulk_fields(result: ParseResult) -> dict[str, Any]:
    """The fields Beam's records and Spark's rows carry, in `BULK_FIELDS`' order: tree,
    score, and the marginals and spans the result was parsed with (as `result_fields` gives
    them; no tree is read)."""
    return _parse_fields(result, spelled_out=False)


def _preorder_spans(tree: nltk.Tree) -> list[tuple[str, int, int]]:
    """(label, first word, last word) of each bracket but the root's and the parts of
    speech', in the order the tree string opens them (preorder)."""
    leaves = tree.treepositions("leaves")
    spans = []
    for position in tree.treepositions():
        node = tree[position]
        if not position or not hasattr(node, "label") or not hasattr(node[0], "label"):
            continue  # the root, a word, or a part of speech
        first = bisect.bisect_left(leaves, position)
        last = bisect.bisect_left(leaves, position + (math.inf,)) - 1
        spans.append((node.label(), first, last))
    return spans
