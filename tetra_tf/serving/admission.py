"""Admission: a predict request's arrays (or their declared shapes) checked against the
limits before TensorFlow sees them.

The limits of a served version are the export's (assets.extra/limits.json), lowered by
the server's flags (`Limits`), never raised. Sentences and word rows are checked by the
sentence contract (tetra_tf.contract.sentences): a refused sentence's message is
"sentence N: REASON: detail", so that `sentences.reason_in` finds its reason.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from tetra_tf.contract import export_format, sentences
from tetra_tf.contract import text as text_lib
from tetra_tf.serving.errors import RequestError

MAX_INPUT_RANK = 8  # Deeper inputs are rejected before they become arrays.


@dataclasses.dataclass(frozen=True)
class Limits:
    """The server's own bounds on one predict request (its flags); 0: the export's."""

    max_batch_size: int = 64
    max_words_per_sentence: int = 0
    max_words_per_request: int = 16384
    sentence_inputs: tuple[str, ...] = (export_format.SENTENCES_INPUT,)
    word_inputs: tuple[str, ...] = (export_format.WORDS_INPUT,)
    max_pieces_per_request: int = 0
    text_inputs: tuple[str, ...] = (export_format.TEXT_INPUT,)


@dataclasses.dataclass(frozen=True)
class ModelLimits:
    """The bounds one version is served with: the export's, lowered by the server's.

    Attributes:
      sentence: the sentence contract's limits (words per sentence, the export's pieces).
      max_pieces_per_request: subword pieces in one request (and one merged model call);
        0: none (an export that publishes no limits).
    """

    max_batch_size: int
    max_words_per_request: int
    max_pieces_per_request: int
    sentence: sentences.SentenceLimits
    sentence_inputs: tuple[str, ...]
    word_inputs: tuple[str, ...]
    text_inputs: tuple[str, ...] = (export_format.TEXT_INPUT,)

    @classmethod
    def of(cls, limits: Limits, export_limits: dict[str, int]) -> "ModelLimits":
        sentence = sentences.SentenceLimits.from_export(export_limits).lowered(
            max_words=limits.max_words_per_sentence)
        pieces = [n for n in (sentence.max_pieces, limits.max_pieces_per_request) if n]
        return cls(limits.max_batch_size, limits.max_words_per_request,
                   min(pieces) if pieces else 0, sentence, limits.sentence_inputs,
                   limits.word_inputs, limits.text_inputs)


@dataclasses.dataclass
class Prepared:
    """A checked predict request: its inputs, rows, and per-row pieces and words."""

    signature_name: str
    inputs: dict[str, np.ndarray]
    batch_size: int
    row_pieces: np.ndarray | None = None  # subword pieces per row (sentence inputs only)
    row_widths: np.ndarray | None = None  # words per row (sentence or word inputs)


def check_declared_shape(name: str, shape: Sequence[int], limits: ModelLimits) -> None:
    """Checks an input's shape (declared by a TensorProto, or a JSON list's nesting) before
    any array of that shape is built.

    Raises:
      RequestError: a negative dimension, too deep, more rows than --max_batch_size, more
        values than --max_words_per_request, or word rows wider than a sentence may be.
    """
    if len(shape) > MAX_INPUT_RANK:
        raise RequestError(f"input '{name}' has {len(shape)} dimensions, more than "
                           f"{MAX_INPUT_RANK}")
    for size in shape:
        if size < 0:
            raise RequestError(f"input '{name}' declares a negative dimension ({size})")
    if shape and shape[0] > limits.max_batch_size:
        raise RequestError(f"input '{name}' declares {shape[0]} rows, more than "
                           f"--max_batch_size={limits.max_batch_size}")
    values = math.prod(shape)
    if values > limits.max_words_per_request:
        raise RequestError(f"input '{name}' declares {values} values, more than a request "
                           f"may hold (--max_words_per_request={limits.max_words_per_request})")
    max_words = limits.sentence.max_words
    if name in limits.word_inputs and len(shape) >= 2 and max_words and shape[-1] > max_words:
        raise RequestError(f"input '{name}' has rows of {shape[-1]} words, more than "
                           f"--max_words_per_sentence={max_words}")


def prepare(signature_name: str, inputs: dict[str, np.ndarray], limits: ModelLimits,
            piece_counter: Any = None) -> Prepared:
    """Checks a request's input arrays against the limits, before the model runs.

    Sentences, word rows and raw texts (split and tokenized as the export's ``parse_text``
    does, `tetra_tf.contract.text`) are checked by the sentence contract, then their subword pieces
    are counted (with the export's vocabulary, when it ships one and publishes limits).

    Raises:
      RequestError: a check failed (400).
    """
    for name, array in inputs.items():
        check_declared_shape(name, array.shape, limits)
    row_sentences: list[list[list[str]]] | None = None  # per row: its sentences' words
    texts = False
    for name, array in sorted(inputs.items()):
        if array.dtype != object:
            continue
        if name in limits.sentence_inputs:
            row_sentences = [[words] for words in _check_sentences(name, array, limits)]
        elif name in limits.word_inputs and array.ndim >= 2:
            row_sentences = [[words] for words in _check_word_rows(
                name, array, inputs.get(export_format.NUM_WORDS_INPUT), limits)]
        elif name in limits.text_inputs:
            row_sentences, texts = _check_texts(name, array, limits), True
    batch_size = _check_batch(inputs)
    # A text row's outputs are [sentences, words]: no words width to trim them to.
    row_widths = (np.array([max(map(len, row), default=0) for row in row_sentences], np.int64)
                  if row_sentences is not None and not texts else None)
    row_pieces = None
    if row_sentences is not None and piece_counter is not None and \
            limits.max_pieces_per_request:
        row_pieces = _count_pieces(row_sentences, limits, piece_counter, texts)
    return Prepared(signature_name, inputs, batch_size, row_pieces, row_widths)


def _count_pieces(row_sentences: list[list[list[str]]], limits: ModelLimits,
                  piece_counter: Any, texts: bool) -> np.ndarray:
    """Pieces per row, checked per sentence and for the request."""
    max_pieces = limits.max_pieces_per_request
    cap = piece_counter.max_pieces_per_word
    sentence_words = [words for row in row_sentences for words in row]
    sentence_widths = np.array([len(words) for words in sentence_words], np.int64)
    rows = np.repeat(np.arange(len(row_sentences)), [len(row) for row in row_sentences])
    if cap * int(sentence_widths.sum()) <= max_pieces:
        # Within the limit whatever the words are: skip tokenizing (the costly part), and
        # let the upper bound stand for the pieces when merging.
        return np.bincount(rows, cap * sentence_widths, len(row_sentences)).astype(np.int64)
    counts = piece_counter.count([w for words in sentence_words for w in words])
    sentence_pieces = np.array([int(part.sum()) for part in
                                np.split(counts, np.cumsum(sentence_widths)[:-1])], np.int64)
    first_of_row = np.cumsum([0] + [len(row) for row in row_sentences])
    for index, pieces in enumerate(sentence_pieces):
        try:
            sentences.check_pieces(int(pieces), limits.sentence)
            if pieces > max_pieces:
                raise sentences.SentenceError(sentences.TOO_MANY_PIECES, _pieces_detail(
                    int(pieces), max_pieces, cap))
        except sentences.SentenceError as e:
            row = int(rows[index])
            where = (f"text {row}: sentence {index - first_of_row[row]}" if texts
                     else f"sentence {index}")
            raise RequestError(f"{where}: {e}") from None
    row_pieces = np.bincount(rows, sentence_pieces, len(row_sentences)).astype(np.int64)
    total = int(row_pieces.sum())
    if total > max_pieces:
        raise RequestError(f"{sentences.TOO_MANY_PIECES}: the request has "
                           f"{_pieces_detail(total, max_pieces, cap)}")
    return row_pieces


def _pieces_detail(pieces: int, max_pieces: int, cap: int) -> str:
    return (f"{pieces} subword pieces (a word counts at most {cap}), more than "
            f"max_pieces_per_request={max_pieces}")


def _check_sentences(name: str, array: np.ndarray, limits: ModelLimits) -> list[list[str]]:
    """Checks sentences by the sentence contract; returns each one's words."""
    total_words = 0
    row_words = []
    for index, sentence in enumerate(array.reshape(-1)):
        try:
            words = sentences.bytes_to_words(sentence, limits.sentence)
        except sentences.SentenceError as e:
            raise RequestError(f"sentence {index}: {e}") from None
        row_words.append(words)
        total_words += len(words)
    if total_words > limits.max_words_per_request:
        raise RequestError(f"input '{name}' has {total_words} words in all, more than "
                           f"--max_words_per_request={limits.max_words_per_request}")
    return row_words


def _check_texts(name: str, array: np.ndarray, limits: ModelLimits) -> list[list[list[str]]]:
    """Checks raw texts: each is split into sentences and PTB tokens (`tetra_tf.contract.text`,
    as the export's graph splits it), and each sentence checked by the contract; returns
    each text's sentences' words."""
    total_words = 0
    row_sentences = []
    for index, data in enumerate(array.reshape(-1)):
        try:
            if len(data) > limits.sentence.max_line_bytes:
                raise sentences.SentenceError(
                    sentences.TOO_LONG,
                    f"{len(data)} bytes, more than max_line_bytes={limits.sentence.max_line_bytes}")
            document = text_lib.checked_document(sentences.decode_utf8(data), limits.sentence)
        except sentences.SentenceError as e:
            raise RequestError(f"text {index}: {e}") from None
        for position, (sentence, error) in enumerate(document):
            if error is not None:
                raise RequestError(f"text {index}: sentence {position}: {error}")
            total_words += len(sentence.tokens)
        row_sentences.append([sentence.words for sentence, _ in document])
    if total_words > limits.max_words_per_request:
        raise RequestError(f"input '{name}' has {total_words} words in all, more than "
                           f"--max_words_per_request={limits.max_words_per_request}")
    return row_sentences


def _check_word_rows(name: str, words: np.ndarray, num_words: np.ndarray | None,
                     limits: ModelLimits) -> list[list[str]]:
    """Checks pre-split sentences: rows of words [..., W], with num_words [...] words each."""
    width = words.shape[-1]
    rows = words.reshape(-1, width)
    if num_words is None:
        counts = np.full(len(rows), width)
    elif num_words.shape == words.shape[:-1]:
        counts = num_words.reshape(-1)
    else:
        raise RequestError(f"input '{export_format.NUM_WORDS_INPUT}' has shape "
                           f"{list(num_words.shape)}; expected {list(words.shape[:-1])} to "
                           f"match '{name}'")
    row_words = []
    for index, (row, count) in enumerate(zip(rows, counts)):
        try:
            if not 0 <= count <= width:
                raise sentences.SentenceError(
                    sentences.BAD_WORDS, f"{export_format.NUM_WORDS_INPUT}={count} is not "
                    f"between 1 and the width of '{name}' ({width})")
            row_words.append(sentences.check_words(
                [sentences.decode_utf8(word) for word in row[:count]], limits.sentence))
        except sentences.SentenceError as e:
            raise RequestError(f"sentence {index}: {e}") from None
    return row_words


def _check_batch(inputs: dict[str, np.ndarray]) -> int:
    """Returns the batch size (the leading dimension of the inputs)."""
    sizes = {value.shape[0] for value in inputs.values() if value.ndim > 0}
    if 0 in sizes:
        raise RequestError("empty batch: inputs need at least one element")
    return max(sizes) if sizes else 1
