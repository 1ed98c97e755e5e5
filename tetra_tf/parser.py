"""Host-side parsing with an exported SavedModel (see tetra_tf/export.py).

  parser = tetra_tf.Parser("models/tetra/1")
  tree = parser.parse(["The", "cat", "sat", "."])        # nltk.Tree (TOP (S ...))
  trees = parser.parse_sents(list_of_word_lists)        # batched, in input order
  results = parser.parse_results(list_of_word_lists)    # trees with scores and tags
  each = parser.parse_each(list_of_word_lists)          # ScoredTree or error, per sentence
  parser.card                                           # the export's model card (or None)

The SavedModel does all the work (tokenization, tagging, decoding, the bracketed tree);
this class batches sentences by length, so that each batch is padded only to its own
longest sentence, and turns the results into nltk trees.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import itertools
import numbers
import os
import re
import threading
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import tetra_tf  # noqa: F401  (selects Keras 2 before TensorFlow loads)

import nltk
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops the SavedModel uses)

from tetra_tf import model_card
from tetra_tf.tags import tags_to_tree
from tetra_tf.treebank import iter_subtrees

SERVING_SIGNATURE = "serving_default"
DEFAULT_BATCH_SIZE = 64
# Model calls in flight at once: on a 2-core CPU two concurrent calls parse 1.01-1.56x the
# sentences per second of one call using both cores (TensorFlow's per-op threading gains
# little on one call's small matmuls; see README.md, "Benchmarks").
DEFAULT_CONCURRENT_CALLS = 2
# The errors that mean "this input cannot be parsed" (not a broken model): a bad sentence,
# or one over the graph's work bounds.
REJECTION_ERRORS: tuple[type[Exception], ...] = (ValueError, tf.errors.InvalidArgumentError)


class Parser:
    """Parses pre-tokenized sentences with an exported tetra-tagging SavedModel.

    Words are placed in the trees verbatim (PTB tokens such as -LRB- stay as they are);
    the leaves carry the model's predicted part-of-speech tags; the root is TOP.
    """

    def __init__(self, export_dir: str, concurrent_calls: int = DEFAULT_CONCURRENT_CALLS):
        """Loads the SavedModel.

        Args:
          export_dir: a local path, or one that TensorFlow's file systems read (gs://...).
          concurrent_calls: batches parsed at once when a call is given several: their
            model calls run on that many pool threads (so a `tf.device` scope around a
            parse does not reach them), each holding its own activations in memory. Each
            thread of the caller's that parses gets its own pool.

        Raises:
          FileNotFoundError: if export_dir holds no SavedModel.
          ValueError: if the SavedModel is not a tetra-tf export, or concurrent_calls < 1.
        """
        self.concurrent_calls = concurrent_calls
        if not has_saved_model(export_dir):
            raise FileNotFoundError(f"{export_dir}: no SavedModel (saved_model.pb) there")
        self.export_dir = export_dir
        self._model = tf.saved_model.load(export_dir)
        if SERVING_SIGNATURE not in self._model.signatures or not hasattr(
                self._model, "max_stack_depth"):
            raise ValueError(f"{export_dir}: not a tetra-tf parser SavedModel")
        self._serve = self._model.signatures[SERVING_SIGNATURE]
        # Constants of the export, read once: every batch consults them.
        names = ("max_pieces_per_word", "max_pieces_per_call", "max_window_positions_per_call")
        self._limits = {name: int(getattr(self._model, name).numpy()) for name in names
                        if hasattr(self._model, name)}
        self._card = model_card.read(export_dir)

    @property
    def concurrent_calls(self) -> int:
        """Model calls in flight at once over a call's batches (1: one at a time)."""
        return self._concurrent_calls

    @concurrent_calls.setter
    def concurrent_calls(self, count: int) -> None:
        if not isinstance(count, numbers.Integral) or count < 1:
            raise ValueError(f"concurrent_calls must be a positive integer, got {count!r}")
        self._concurrent_calls = int(count)

    @property
    def max_stack_depth(self) -> int:
        """The decoder's stack depth cap, recorded in the SavedModel."""
        return int(self._model.max_stack_depth.numpy())

    @property
    def model(self):
        """The loaded SavedModel object (signatures, tag vocabularies)."""
        return self._model

    def parse(self, words: Sequence[str]) -> nltk.Tree:
        """Parses one sentence of pre-tokenized words into a tree.

        Raises:
          ValueError: for no words, a word that is not a string, an empty word or a word
            containing whitespace.
        """
        return self.parse_sents([words])[0]

    def parse_sents(self, sentences: Sequence[Sequence[str]],
                    batch_size: int = DEFAULT_BATCH_SIZE,
                    progress: Callable[[int], None] | None = None) -> list[nltk.Tree]:
        """Parses sentences in batches of similar length; returns trees in input order.

        Args:
          sentences: lists of pre-tokenized words.
          batch_size: sentences per call of the SavedModel.
          progress: called with the number of sentences after each batch.

        Raises:
          ValueError: for a sentence that is not a list of words or has none, a word that is
            not a string (int, None, bytes, a list ...), an empty word or a word containing
            whitespace (the message gives the sentence and word index), or a sentence over
            the graph's work bounds on its own (more than max_pieces_per_call pieces).
        """
        trees: list[nltk.Tree | None] = [None] * len(sentences)
        for indices, outputs in self._run(sentences, batch_size, progress):
            pos_tags = outputs["pos_tags"]
            leaf_tags = outputs["leaf_tags"]
            internal_tags = outputs["internal_tags"]
            for row, index in enumerate(indices):
                words = sentences[index]
                n = len(words)
                trees[index] = _build_tree(
                    words, _decode(pos_tags[row, :n]), _decode(leaf_tags[row, :n]),
                    _decode(internal_tags[row, :n - 1]))
        return trees  # type: ignore[return-value]

    def parse_to_strings(self, sentences: Sequence[Sequence[str]],
                         batch_size: int = DEFAULT_BATCH_SIZE,
                         progress: Callable[[int], None] | None = None) -> list[str]:
        """Like `parse_sents`, but returns the SavedModel's one-line bracketed trees."""
        return [scored.bracketed for scored in
                self.parse_to_scored_strings(sentences, batch_size, progress)]

    def parse_to_scored_strings(self, sentences: Sequence[Sequence[str]],
                                batch_size: int = DEFAULT_BATCH_SIZE,
                                progress: Callable[[int], None] | None = None
                                ) -> list[ScoredTree]:
        """Like `parse_to_strings`, but each one-line tree comes with its score (`ScoredTree`)."""
        results: list[ScoredTree | None] = [None] * len(sentences)
        for indices, outputs in self._run(sentences, batch_size, progress):
            for row, index in enumerate(indices):
                results[index] = ScoredTree(bracketed=outputs["tree"][row].decode("utf-8"),
                                            score=float(outputs["score"][row]))
        return results  # type: ignore[return-value]

    def parse_each(self, sentences: Sequence[Sequence[str]],
                   batch_size: int = DEFAULT_BATCH_SIZE,
                   progress: Callable[[int], None] | None = None,
                   on_failed_batch: Callable[[int], None] | None = None,
                   errors: tuple[type[Exception], ...] = REJECTION_ERRORS
                   ) -> list[ScoredTree | Exception]:
        """Parses sentences like `parse_to_scored_strings`, keeping each failure to its sentence.

        Sentences go in batches of similar length, `concurrent_calls` batches at once; when
        a batch's call raises one of `errors`, its sentences are parsed again one at a time
        (on the same thread, so the model calls in flight stay within `concurrent_calls`),
        so that only the sentences that fail alone fail.

        Args:
          sentences: lists of pre-tokenized words.
          batch_size: sentences per batch.
          progress: called with the number of sentences after each batch.
          on_failed_batch: called with the number of sentences of each batch whose call
            failed.
          errors: the exceptions that fail a sentence; any other propagates.

        Returns:
          Per sentence, in input order: its `ScoredTree`, or the exception (one of `errors`)
          that parsing it alone raised.

        Raises:
          ValueError: for a batch_size below 1.
        """
        batches = self._batches(sentences, batch_size)

        def parse_batch(indices: list[int]) -> tuple[bool, list[ScoredTree | Exception]]:
            """(whether the batch's call failed, its results)."""
            batch = [sentences[i] for i in indices]
            try:
                return False, self.parse_to_scored_strings(batch, batch_size)
            except errors as e:
                return True, [e] if len(batch) == 1 else [self._parse_alone(words, errors)
                                                          for words in batch]

        results: list[ScoredTree | Exception | None] = [None] * len(sentences)
        for indices, batch_results in zip(
                batches, _in_order(parse_batch, batches, self.concurrent_calls)):
            failed, outputs = batch_results.result()
            if failed and on_failed_batch is not None:
                on_failed_batch(len(indices))
            for index, output in zip(indices, outputs):
                results[index] = output
            if progress is not None:
                progress(len(indices))
        return results  # type: ignore[return-value]

    def _parse_alone(self, words: Sequence[str], errors: tuple[type[Exception], ...]
                     ) -> ScoredTree | Exception:
        try:
            return self.parse_to_scored_strings([words], 1)[0]
        except errors as e:
            return e

    def parse_results(self, sentences: Sequence[Sequence[str]],
                      batch_size: int = DEFAULT_BATCH_SIZE,
                      progress: Callable[[int], None] | None = None) -> list[ParseResult]:
        """Like `parse_sents`, but each tree comes with its score and tags (`ParseResult`)."""
        results: list[ParseResult | None] = [None] * len(sentences)
        for indices, outputs in self._run(sentences, batch_size, progress):
            for row, index in enumerate(indices):
                words = sentences[index]
                n = len(words)
                pos_tags = _decode(outputs["pos_tags"][row, :n])
                leaf_tags = _decode(outputs["leaf_tags"][row, :n])
                internal_tags = _decode(outputs["internal_tags"][row, :n - 1])
                results[index] = ParseResult(
                    tree=_build_tree(words, pos_tags, leaf_tags, internal_tags),
                    score=float(outputs["score"][row]), pos_tags=pos_tags,
                    leaf_tags=leaf_tags, internal_tags=internal_tags,
                    bracketed=outputs["tree"][row].decode("utf-8"))
        return results  # type: ignore[return-value]

    @property
    def card(self) -> dict[str, Any] | None:
        """The export's model card (tetra_tf/model_card.py), None if it was made without one."""
        return self._card

    @property
    def limits(self) -> dict[str, int]:
        """The work bounds the SavedModel's graph enforces (see export.py), {} if none."""
        return dict(self._limits)

    def _run(self, sentences: Sequence[Sequence[str]], batch_size: int,
             progress: Callable[[int], None] | None) -> Iterator[tuple[list[int], dict]]:
        """Yields (sentence indices, numpy outputs) per batch (`_batches`), with up to
        concurrent_calls batches' model calls at once. Every sentence's words are checked
        before the first call (ValueError)."""
        batches = self._batches(sentences, batch_size)
        joined = [_join_words(words, i) for i, words in enumerate(sentences)]

        def call(indices: list[int]) -> dict:
            try:
                outputs = self._serve(sentences=tf.constant([joined[i] for i in indices]))
            except tf.errors.InvalidArgumentError as e:
                if len(indices) > 1:
                    raise
                raise ValueError(f"sentence {indices[0]}: {_assertion_text(e.message)}"
                                 ) from None
            return {key: value.numpy() for key, value in outputs.items()}

        for indices, outputs in zip(batches, _in_order(call, batches, self.concurrent_calls)):
            yield indices, outputs.result()
            if progress is not None:
                progress(len(indices))

    def _batches(self, sentences: Sequence[Sequence[str]], batch_size: int
                 ) -> list[list[int]]:
        """Sentence indices in batches, shortest sentences first: each one model call.

        A batch holds at most batch_size sentences and max_pieces_per_call //
        max_pieces_per_word words, so that it never exceeds the graph's bounds (a sentence
        alone can: its call then fails).

        Raises:
          ValueError: for a batch_size below 1.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        limits = self._limits
        max_words = (limits["max_pieces_per_call"] // limits["max_pieces_per_word"]
                     if "max_pieces_per_call" in limits and "max_pieces_per_word" in limits
                     else None)
        batches: list[list[int]] = []
        words_in_batch = 0
        for index in sorted(range(len(sentences)), key=lambda i: _sort_length(sentences[i])):
            count = len(sentences[index]) if _is_word_list(sentences[index]) else 0
            if not batches or len(batches[-1]) == batch_size or (
                    max_words is not None and words_in_batch + count > max_words):
                batches.append([])
                words_in_batch = 0
            batches[-1].append(index)
            words_in_batch += count
        return batches


class ScoredTree(NamedTuple):
    """One sentence's one-line bracketed tree (the SavedModel's) and its score.

    Attributes:
      bracketed: the tree, as `ParseResult.bracketed`.
      score: its log-probability, as `ParseResult.score`.
    """

    bracketed: str
    score: float


@dataclasses.dataclass(frozen=True)
class ParseResult:
    """One sentence's parse: the tree, its score and the tags it was built from.

    Attributes:
      tree: the nltk tree (TOP root, predicted POS tags, words verbatim).
      score: log-probability of the chosen leaf and internal tags under the model (the
        decoder's objective; ≤ 0, higher is more confident; POS tags not included).
      pos_tags, leaf_tags: one per word.
      internal_tags: one per fencepost between words (n − 1).
      bracketed: the SavedModel's one-line tree string.
    """

    tree: nltk.Tree
    score: float
    pos_tags: list[str]
    leaf_tags: list[str]
    internal_tags: list[str]
    bracketed: str


_pool_thread = threading.local()  # .active: this thread is one of _in_order's workers.


def _mark_pool_thread() -> None:
    _pool_thread.active = True


def _in_order(function: Callable[[Any], Any], items: Sequence[Any], in_flight: int
              ) -> Iterator[concurrent.futures.Future]:
    """Runs function on each item, up to in_flight at once on threads, in item order.

    Args:
      function: called once per item.
      items: the work, in order.
      in_flight: calls that may run at once. With 1, with one item, or when called from one
        of this function's own worker threads (no pools within pools), every call runs in
        the calling thread.

    Returns:
      An iterator of futures, one per item in item order, each done when yielded: its
      .result() is the call's result or raises the call's exception. The iterator holds
      the yielded one and at most in_flight running or finished ahead of it; closing it
      early cancels what has not started and waits for what has.
    """
    if in_flight == 1 or len(items) <= 1 or getattr(_pool_thread, "active", False):
        for item in items:
            done: concurrent.futures.Future = concurrent.futures.Future()
            try:
                done.set_result(function(item))
            except Exception as e:  # noqa: BLE001 - handed to the caller through .result()
                done.set_exception(e)
            yield done
        return
    remaining = iter(items)
    with concurrent.futures.ThreadPoolExecutor(in_flight, "tetra-parse",
                                               initializer=_mark_pool_thread) as pool:
        pending = collections.deque(pool.submit(function, item)
                                    for item in itertools.islice(remaining, in_flight))
        try:
            while pending:
                future = pending.popleft()
                concurrent.futures.wait([future])
                pending.extend(pool.submit(function, item)
                               for item in itertools.islice(remaining, 1))
                yield future
        finally:
            for future in pending:
                future.cancel()


def has_saved_model(export_dir: str) -> bool:
    """Whether export_dir holds a SavedModel (a local path, or gs://... and the other file
    systems TensorFlow reads)."""
    return tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb"))


def _is_word_list(words: Any) -> bool:
    """Whether a sentence is a sequence (of words, if valid), not a str or bytes."""
    return isinstance(words, Sequence) and not isinstance(words, (str, bytes))


def _sort_length(words: Sequence[str]) -> int:
    """A sentence's length in characters, a space after each word: `_batches` sorts by it
    before the words are checked.

    0 for something that is not a list of words (parsing it fails anyway).
    """
    if not _is_word_list(words):
        return 0
    return sum(len(word) + 1 for word in words if isinstance(word, str))


def _join_words(words: Sequence[str], index: int) -> str:
    """Joins a sentence's words with spaces, checking that they split back the same."""
    if not _is_word_list(words):
        raise ValueError(f"sentence {index}: expected a list of words, got "
                         f"{type(words).__name__}")
    if not words:
        raise ValueError(f"sentence {index} has no words")
    for position, word in enumerate(words):
        if not isinstance(word, str):
            raise ValueError(f"sentence {index}: word {position} is {_describe(word)}, not "
                             "a string")
    joined = " ".join(words)
    if len(joined.split()) != len(words):
        for position, word in enumerate(words):
            if not word:
                raise ValueError(f"sentence {index}: word {position} is empty")
            if any(c.isspace() for c in word):
                raise ValueError(f"sentence {index}: word {position} ({word!r}) contains "
                                 "whitespace")
    return joined


def _assertion_text(message: str) -> str:
    """The text of a graph assertion ("... assertion failed: [TEXT] ..." → TEXT)."""
    match = re.search(r"assertion failed: \[(.*?)\]\s*$", message, re.MULTILINE)
    if match:
        return match.group(1)
    lines = [line for line in message.splitlines() if line.strip()]
    return lines[0] if lines else message


def _describe(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _decode(values: np.ndarray) -> list[str]:
    return [value.decode("utf-8") for value in values]


def _build_tree(words: Sequence[str], pos_tags: list[str], leaf_tags: list[str],
                internal_tags: list[str]) -> nltk.Tree:
    return tags_to_tree(list(words), pos_tags, leaf_tags, internal_tags)


def with_pos_tags(tree: nltk.Tree, pos_tags: Sequence[str]) -> nltk.Tree:
    """Returns a copy of `tree` whose preterminals carry `pos_tags` (e.g. gold POS, for F1).

    Raises:
      ValueError: if the tree has a different number of words.
    """
    copy = nltk.Tree(tree.label(), [])
    stack = [(tree, copy)]  # an explicit stack: trees of any depth
    while stack:
        source, target = stack.pop()
        for child in source:
            if isinstance(child, nltk.Tree):
                target.append(nltk.Tree(child.label(), []))
                stack.append((child, target[-1]))
            else:
                target.append(child)
    preterminals = [node for node in iter_subtrees(copy)
                    if len(node) == 1 and not isinstance(node[0], nltk.Tree)]
    if len(preterminals) != len(pos_tags):
        raise ValueError(f"the tree has {len(preterminals)} words but {len(pos_tags)} POS "
                         "tags were given")
    for node, pos in zip(preterminals, pos_tags):
        node.set_label(pos)
    return copy
