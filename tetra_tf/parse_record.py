"""One sentence's parse (or refusal) as a JSON object: the one owner of its field names.

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
  `tetra_tf.sentences`) and ``error`` (``"REASON: DETAIL"``, as the command prints it).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Iterable

from tetra_tf.sentences import SentenceError

if TYPE_CHECKING:  # tetra_tf.parser loads TensorFlow
    from tetra_tf.parser import Constituent, ParseResult

FILE, LINE, SENTENCE_NUMBER = "file", "line", "sentence_number"
START, END = "start", "end"
WORDS, WORD_STARTS, WORD_ENDS, POS_TAGS = "words", "word_starts", "word_ends", "pos_tags"
TREE, SCORE = "tree", "score"
TREE_PROBABILITY, CONSTITUENT_MARGINALS = "tree_probability", "constituent_marginals"
CONSTITUENTS, SPAN_MARGINALS, K_BEST = "constituents", "span_marginals", "k_best"
REASON, ERROR = "reason", "error"
# The fields of a parse that Beam's records and Spark's rows carry, in their order.
BULK_FIELDS = (TREE, SCORE, TREE_PROBABILITY, CONSTITUENT_MARGINALS, SPAN_MARGINALS)


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
