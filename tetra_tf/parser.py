"""Host-side parsing with an exported SavedModel (see tetra_tf/export.py).

```python
import tetra_tf

parser = tetra_tf.Parser("models/tetra/1")
tree = parser.parse(["The", "cat", "sat", "."])     # nltk.Tree (TOP (S ...))
trees = parser.parse_sents(list_of_word_lists)     # batched, in input order
results = parser.parse_each(list_of_word_lists)    # per sentence: a ParseResult, or
                                                   # the SentenceError refusing it
sentences = parser.parse_text("It rained. We left.")  # raw text: sentences, tokens with
                                                   # character offsets, and parses
parser.card                                        # the export's model card (or None)
```

The SavedModel does all the work (tokenization, tagging, decoding, the bracketed tree);
this class checks sentences by the sentence contract (tetra_tf/contract/sentences.py), batches
them by length so that each batch is padded only to its own longest sentence, and owns the
failure policy every way in shares: a refused sentence fails alone with its reason; a
failure of the model itself raises `ModelError` at once. Its results (`ParseResult`,
`Constituent`, `TextSentence`) are `tetra_tf.contract.parse_record`'s, which reads them without
TensorFlow.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import itertools
import numbers
import re
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np
from absl import logging
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer's ops the SavedModel uses)

from tetra_tf import cpu, packaged_models
from tetra_tf.contract import export_format, sentences
from tetra_tf.contract import text as text_lib
from tetra_tf.contract.parse_record import Constituent, ParseResult, TextSentence
from tetra_tf.contract.sentences import SentenceError, SentenceLimits
from tetra_tf.decode import constraints as constraints_lib
from tetra_tf.decode.constraints import Constraints
from tetra_tf.errors import ExportError, ModelError

if TYPE_CHECKING:
    import nltk

# Model calls in flight at once. On a 2-core CPU, with TensorFlow's default pools, two
# concurrent calls parsed 1.01-1.56x the sentences per second of one call using both cores
# (TensorFlow's per-op threading gains little on one call's small matmuls); with the pools
# sized for them (`cpu.share_cores`, one intra-op thread per call) two calls parsed 1.4-1.8x
# as much again at batch 1 (docs/benchmarks.md, "Parser concurrency").
DEFAULT_CONCURRENT_CALLS = 2

__all__ = ["Constraints", "ModelError", "Parser"]
# Why parse_constrained found no tree for a sentence.
_UNSATISFIABLE_DETAIL = ("no tree the model can build has every forced span (with its "
                         "label) and none of the forbidden ones")


class Parser:
    """Parses pre-tokenized sentences with an exported tetra-tagging SavedModel.

    A sentence is a list of words (PTB tokens: `-LRB-`, ``` `` ```, ...). Every method checks
    each sentence by the sentence contract (`tetra_tf.contract.sentences`), batches sentences of
    similar length and keeps each model call under the export's limits. `parse_each` gives
    every sentence its own result; `parse` and `parse_sents` raise the first refusal.

    Example:
        ```python
        import tetra_tf

        parser = tetra_tf.Parser("models/tetra/1")
        print(parser.parse("The cat sat on the mat .".split()).pformat(margin=10**6))
        # (TOP (S (NP (DT The) (NNP cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .)))
        ```
    """

    def __init__(self, export_dir: str | None = None,
                 concurrent_calls: int = DEFAULT_CONCURRENT_CALLS):
        """Loads the SavedModel.

        Args:
          export_dir: an export's path (local, or one that TensorFlow's file systems read:
            gs://...), or a packaged model's name; None: the packaged default model
            (`tetra_tf.packaged_models`).
          concurrent_calls: batches parsed at once when a call is given several: their
            model calls run on that many pool threads (so a `tf.device` scope around a
            parse does not reach them), each holding its own activations in memory. If
            TensorFlow has not run in this process yet and its thread pools were not set,
            they are sized for that many calls at once (`cpu.share_cores`: intra-op
            threads = cores // concurrent_calls).

        Raises:
          ExportError: if export_dir holds no SavedModel, one that is not a tetra-tf
            export, or unreadable export files; or names a packaged model that is not
            there or whose files are damaged.
          ValueError: if concurrent_calls < 1.
        """
        self.concurrent_calls = concurrent_calls
        export_dir = packaged_models.resolve(export_dir)
        export_format.check(export_dir)
        self.export_dir = export_dir
        if cpu.share_cores(self.concurrent_calls):  # before the load starts TensorFlow's runtime
            logging.debug("TensorFlow's thread pools sized for %d concurrent calls: %d intra-op "
                          "thread(s) each (set tf.config.threading before making a Parser to "
                          "choose otherwise)", self.concurrent_calls,
                          tf.config.threading.get_intra_op_parallelism_threads())
        self._export_limits = export_format.read_limits(export_dir)
        self._card = export_format.read_card(export_dir)
        try:
            self._model = tf.saved_model.load(export_dir)
        except (OSError, tf.errors.OpError) as e:
            raise ExportError(f"{export_dir}: cannot load the SavedModel "
                              f"({_first_line(str(e))[:200]})") from None
        if export_format.SERVING_SIGNATURE not in self._model.signatures or not hasattr(
                self._model, "max_stack_depth"):
            raise ExportError(f"{export_dir}: not a tetra-tf parser SavedModel")
        self._serve = self._model.signatures[export_format.SERVING_SIGNATURE]
        self._sentence_limits = SentenceLimits.from_export(self._export_limits)
        if self.encoder_dtype == "bfloat16" and (warning := cpu.bfloat16_warning()):
            logging.warning("%s: %s", export_dir, warning)

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

    @property
    def encoder_dtype(self) -> str:
        """The precision of the encoder's matmuls, as the model card records it."""
        return ((self._card or {}).get("encoder") or {}).get("compute_dtype", "float32")

    @property
    def card(self) -> dict[str, Any] | None:
        """The export's model card (`export_format.read_card`), None if made without one."""
        return self._card

    @property
    def export_limits(self) -> dict[str, int]:
        """The work bounds the SavedModel's graph enforces (assets.extra/limits.json), {} if
        the export publishes none."""
        return dict(self._export_limits)

    @property
    def sentence_limits(self) -> SentenceLimits:
        """The export's bounds on one sentence; front ends may only lower them."""
        return self._sentence_limits

    @functools.cached_property
    def phrase_labels(self) -> list[str]:
        """The phrase labels the model puts on constituents (what a forced span may name)."""
        if not hasattr(self._model, "phrase_labels"):
            return []
        return [label for label in _decode(self._model.phrase_labels.numpy()) if label]

    @functools.cached_property
    def pos_tag_names(self) -> list[str]:
        """The parts of speech the model predicts (what `Constraints.pos_tags` may name)."""
        return _decode(self._model.pos_tags.numpy())

    def parse(self, words: Sequence[str]) -> nltk.Tree:
        """Parses one sentence of pre-tokenized words into a tree.

        Args:
          words: the sentence's words, e.g. ``"The cat sat .".split()``.

        Returns:
          The tree, rooted in ``TOP``, with the predicted POS tags above the words (brackets
          in words PTB-escaped).

        Raises:
          SentenceError: if the sentence is refused (see `parse_each`), e.g. reason
            ``empty`` for ``[]``.
          ModelError: if the model itself fails.

        Example:
            ```python
            tree = parser.parse(["Hello", "!"])
            tree.label(), tree.leaves()   # ('TOP', ['Hello', '!'])
            ```
        """
        return self.parse_sents([words])[0]

    def parse_sents(self, word_lists: Sequence[Sequence[str]],
                    batch_size: int = export_format.DEFAULT_BATCH_SIZE,
                    progress: Callable[[int], None] | None = None) -> list[nltk.Tree]:
        """Parses sentences in batches of similar length; returns trees in input order.

        Args:
          word_lists: the sentences, each a list of pre-tokenized words.
          batch_size: most sentences per model call.
          progress: called with a number of sentences as they are done (e.g. a tqdm bar's
            ``update``).

        Returns:
          One `nltk.Tree` per sentence, in input order.

        Raises:
          SentenceError: for the first refused sentence, its index in the detail ("sentence
            3: ..."); `parse_each` gives every sentence its own result instead.
          ModelError: if the model itself fails.
          ValueError: for a batch_size below 1.

        Example:
            ```python
            trees = parser.parse_sents([["Hello", "!"], ["Dogs", "bark", "."]])
            [tree.leaves() for tree in trees]   # [['Hello', '!'], ['Dogs', 'bark', '.']]
            ```
        """
        results = self._parse_each(word_lists, batch_size, None, progress, read_trees=True)
        for index, result in enumerate(results):
            if isinstance(result, SentenceError):
                raise SentenceError(result.reason, f"sentence {index}: {result.detail}")
        return [result.tree for result in results]  # type: ignore[union-attr]

    def parse_each(self, word_lists: Sequence[Sequence[str]],
                   batch_size: int = export_format.DEFAULT_BATCH_SIZE,
                   limits: SentenceLimits | None = None,
                   progress: Callable[[int], None] | None = None,
                   marginals: bool = False,
                   k_best: bool = False,
                   constraints: Sequence[Constraints | None] | None = None,
                   span_marginals: float | None = None
                   ) -> list[ParseResult | SentenceError]:
        """Parses sentences, each failing alone: every way in parses through this.

        Each sentence is checked by `sentences.check_words` against `limits`; the others go
        to the model in batches of similar length, `concurrent_calls` batches at once. A
        batch the graph refuses (InvalidArgumentError: a sentence over its work bounds) is
        parsed again one sentence at a time on the same thread, so that only the sentences
        refused alone fail.

        Args:
          word_lists: lists of pre-tokenized words.
          batch_size: most sentences per model call.
          limits: the sentence limits, from `sentence_limits` lowered by the caller's own
            (default: the export's).
          progress: called with a number of sentences as they are done.
          marginals: also each constituent's probability and the tree's
            (`ParseResult.constituents`), by the export's ``parse_marginals`` signature.
          k_best: also the best trees after this one (`ParseResult.k_best`), by the
            export's ``parse_k_best`` signature (not with marginals).
          constraints: per sentence, the `Constraints` its parse must respect (None: none),
            by the export's ``parse_constrained`` signature (not with marginals or k_best):
            each gets the best tree that has every forced span and no forbidden one, or a
            SentenceError, ``bad_constraints`` (checked before the model runs) or
            ``unsatisfiable`` (no tree has them all).
          span_marginals: a probability p from 0 to 1: also every labelled span whose
            probability is at least p (`ParseResult.span_marginals`; 0: every span the
            model admits), and what ``marginals=True`` gives, by the export's
            ``parse_span_marginals`` signature (not with k_best or constraints). Its work
            grows with words³; sentences of more than 256 words are refused
            (``too_many_words``).

        Returns:
          Per sentence, in input order: its ParseResult, or the SentenceError refusing it.

        Raises:
          ValueError: for a batch_size below 1, constraints not one per sentence, or
            span_marginals outside 0..1.
          ModelError: the model itself failed (any error but the graph refusing a
            sentence); nothing is retried.
          ExportError: marginals, k_best, constraints or span_marginals asked of an export
            without their signature.
          ValueError: for more than one of marginals (or span_marginals), k_best and
            constraints (they are different signatures).

        Example:
            ```python
            from tetra_tf.contract.sentences import SentenceError

            for result in parser.parse_each([["Hello", "!"], []]):
                if isinstance(result, SentenceError):
                    print(result.reason, result.detail)   # empty no words
                else:
                    print(result.score, result.bracketed)
            ```
        """
        if constraints is not None and len(constraints) != len(word_lists):
            raise ValueError(f"constraints has {len(constraints)} entries for "
                             f"{len(word_lists)} sentences")
        if span_marginals is not None:
            export_format.check_span_floor(span_marginals)
        return self._parse_each(word_lists, batch_size, limits, progress, read_trees=False,
                                extra=_extra_signature(marginals, k_best,
                                                       constraints is not None,
                                                       span_marginals is not None),
                                constraints=constraints, min_span_probability=span_marginals)

    def parse_text(self, text: str, split_sentences: bool = True,
                   batch_size: int = export_format.DEFAULT_BATCH_SIZE,
                   limits: SentenceLimits | None = None,
                   marginals: bool = False,
                   span_marginals: float | None = None,
                   k_best: bool = False) -> list[TextSentence]:
        """Parses raw text: splits it into sentences and PTB tokens, with character offsets.

        The text is tokenized as the SavedModel's ``parse_text`` signature tokenizes it
        (`tetra_tf.contract.text`: NLTK's Treebank rules, quotes by side, rule-based sentence ends),
        and each sentence is parsed as `parse_each` parses it, failing alone.

        Args:
          text: raw text: a sentence, a paragraph or a document.
          split_sentences: False: the text is one sentence (a blank one is refused as
            ``empty``).
          batch_size: most sentences per model call.
          limits: as for `parse_each`.
          marginals: as for `parse_each`.
          span_marginals: as for `parse_each`.
          k_best: as for `parse_each`.

        Returns:
          Its sentences in order (none for blank text), each with its tokens and its
          ParseResult or SentenceError.

        Raises:
          TypeError: text is not a str.
          ModelError, ValueError: as `parse_each`.

        Example:
            ```python
            for sentence in parser.parse_text("It rained. We left."):
                print(sentence.start, sentence.end, sentence.result.bracketed)
            # 0 11 (TOP (S (NP (PRP It)) (VP (VBD rained)) (. .)))
            # 11 19 (TOP (S (NP (PRP We)) (VP (VBD left)) (. .)))
            ```
        """
        return self.parse_texts([text], split_sentences, batch_size, limits,
                                marginals=marginals, span_marginals=span_marginals,
                                k_best=k_best)[0]

    def parse_texts(self, texts: Sequence[str], split_sentences: bool = True,
                    batch_size: int = export_format.DEFAULT_BATCH_SIZE,
                    limits: SentenceLimits | None = None,
                    progress: Callable[[int], None] | None = None,
                    marginals: bool = False,
                    span_marginals: float | None = None,
                    k_best: bool = False) -> list[list[TextSentence]]:
        """`parse_text` for many texts, their sentences batched together.

        Args:
          texts: raw texts (documents, paragraphs or sentences).
          split_sentences: as for `parse_text`.
          batch_size: most sentences per model call.
          limits: as for `parse_each`.
          progress: called with a number of sentences as they are done.
          marginals: as for `parse_each`.
          span_marginals: as for `parse_each`.
          k_best: as for `parse_each`.

        Returns:
          Per text, in input order: its sentences.

        Raises:
          TypeError: a text is not a str (naming its index).
          ValueError: span_marginals outside 0..1.
        """
        if span_marginals is not None:
            export_format.check_span_floor(span_marginals)
        documents = []
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {index} is {type(text).__name__}, not str")
            documents.append(text_lib.tokenize_document(text, split=split_sentences))
        results = iter(self._parse_each(
            [sentence.words for document in documents for sentence in document],
            batch_size, limits, progress, read_trees=False,
            extra=_extra_signature(marginals, k_best, False, span_marginals is not None),
            min_span_probability=span_marginals))
        return [[TextSentence(sentence.start, sentence.end, sentence.tokens, next(results),
                              tuple(text[token.start:token.end] for token in sentence.tokens))
                 for sentence in document] for text, document in zip(texts, documents)]

    def _parse_each(self, word_lists: Sequence[Sequence[str]], batch_size: int,
                    limits: SentenceLimits | None, progress: Callable[[int], None] | None,
                    read_trees: bool, extra: str | None = None,
                    constraints: Sequence[Constraints | None] | None = None,
                    min_span_probability: float | None = None
                    ) -> list[ParseResult | SentenceError]:
        """`parse_each`; with read_trees, each batch's nltk Trees are also read on its pool
        thread, where they overlap the model calls in flight (which release the GIL)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if extra:
            self._signature(extra)  # before any work: ExportError if it has none
        limits = limits or self._sentence_limits
        results: list[ParseResult | SentenceError | None] = [None] * len(word_lists)
        checked: dict[int, str] = {}  # index → its words joined by spaces
        constraint_sets: dict[int, Constraints] = {}
        for index, words in enumerate(word_lists):
            try:
                words = sentences.check_words(words, limits)
                if constraints is not None:
                    constraint_sets[index] = self._checked_constraints(constraints[index],
                                                                       len(words))
                checked[index] = " ".join(words)
            except SentenceError as e:
                results[index] = e
        if progress is not None and len(checked) < len(word_lists):
            progress(len(word_lists) - len(checked))
        batches = self._batches(checked, batch_size, self._max_squared_words(extra))
        if read_trees:
            from tetra_tf.trees import treebank  # noqa: F401  (once, before the pool's threads)

        def parse_batch(indices: list[int]) -> list[ParseResult | SentenceError]:
            results = call_batch(indices)
            if read_trees:
                for result in results:
                    if isinstance(result, ParseResult):
                        result.tree  # pylint: disable=pointless-statement  (cached)
            return results

        def call_batch(indices: list[int]) -> list[ParseResult | SentenceError]:
            joined = [checked[index] for index in indices]
            sets = [constraint_sets[index] for index in indices] if constraint_sets else None
            try:
                return (self._call(joined, extra, sets, min_span_probability) if extra
                        else self._call(joined))
            except tf.errors.InvalidArgumentError as e:
                if len(indices) == 1:
                    return [_refusal(e.message)]
            return [self._parse_alone(sentence, extra, [c] if sets else None,
                                      min_span_probability)
                    for sentence, c in zip(joined, sets or [None] * len(joined))]

        for indices, batch in zip(batches, _in_order(parse_batch, batches,
                                                      self.concurrent_calls)):
            for index, result in zip(indices, batch.result()):
                results[index] = result
            if progress is not None:
                progress(len(indices))
        return results  # type: ignore[return-value]

    def _signature(self, name: str):
        """The export's signature `name`; ExportError if it has none of that name."""
        if name not in self._model.signatures:
            raise ExportError(f"{self.export_dir} has no {name} signature (exported by an "
                              f"older tetra-tf: export it again)")
        return self._model.signatures[name]

    def _parse_alone(self, sentence: str, extra: str | None,
                     constraints: list[Constraints] | None = None,
                     min_span_probability: float | None = None
                     ) -> ParseResult | SentenceError:
        try:
            return (self._call([sentence], extra, constraints, min_span_probability) if extra
                    else self._call([sentence]))[0]
        except tf.errors.InvalidArgumentError as e:
            return _refusal(e.message)

    def _checked_constraints(self, constraints: Any, num_words: int) -> Constraints:
        """A sentence's constraints, checked against it and the model (SentenceError
        ``bad_constraints`` if they do not fit)."""
        if constraints is None:
            return Constraints()
        if not isinstance(constraints, Constraints):
            raise SentenceError(sentences.BAD_CONSTRAINTS,
                                f"expected a tetra_tf.Constraints or None, got "
                                f"{type(constraints).__name__}")
        constraints.check(num_words, self.phrase_labels, self.pos_tag_names)
        return constraints

    def _call(self, joined: list[str], extra: str | None = None,
              constraints: list[Constraints] | None = None,
              min_span_probability: float | None = None
              ) -> list[ParseResult | SentenceError]:
        """One model call on sentences (words joined by spaces), through the default
        signature or the one named `extra` (parse_marginals, parse_k_best,
        parse_constrained with each sentence's checked `constraints`, or
        parse_span_marginals with `min_span_probability`).

        Raises:
          tf.errors.InvalidArgumentError: the graph refused the call.
          ModelError: any other failure.
        """
        signature = self._signature(extra) if extra else self._serve
        inputs = {export_format.SENTENCES_INPUT: tf.constant(joined)}
        if constraints is not None:
            inputs.update({name: tf.constant(value) for name, value in
                           constraints_lib.as_inputs(constraints).items()})
        if min_span_probability is not None:
            inputs[export_format.MIN_PROBABILITY_INPUT] = tf.fill(
                [len(joined)], float(min_span_probability))
        try:
            outputs = signature(**inputs)
        except tf.errors.InvalidArgumentError:
            raise
        except Exception as e:  # noqa: BLE001 - the model itself failed
            raise ModelError(f"the model failed: {type(e).__name__}: "
                             f"{_first_line(str(e))}") from e
        lengths = outputs[export_format.NUM_WORDS_OUTPUT].numpy()
        trees = outputs[export_format.TREE_OUTPUT].numpy()
        words = outputs[export_format.WORDS_OUTPUT].numpy()
        scores = outputs[export_format.SCORE_OUTPUT].numpy()
        pos_tags = outputs[export_format.POS_TAGS_OUTPUT].numpy()
        leaf_tags = outputs[export_format.LEAF_TAGS_OUTPUT].numpy()
        internal_tags = outputs[export_format.INTERNAL_TAGS_OUTPUT].numpy()
        marginals = export_format.CONSTITUENT_MARGINALS_OUTPUT in outputs
        if marginals:
            tree_probabilities = outputs[export_format.TREE_PROBABILITY_OUTPUT].numpy()
            constituent_marginals = outputs[export_format.CONSTITUENT_MARGINALS_OUTPUT].numpy()
            counts = outputs[export_format.NUM_CONSTITUENTS_OUTPUT].numpy()
        k_best = export_format.K_BEST_TREES_OUTPUT in outputs
        if k_best:
            k_best_trees = outputs[export_format.K_BEST_TREES_OUTPUT].numpy()
            k_best_scores = outputs[export_format.K_BEST_SCORES_OUTPUT].numpy()
            k_best_counts = outputs[export_format.NUM_K_BEST_OUTPUT].numpy()
        satisfied = (outputs[export_format.SATISFIED_OUTPUT].numpy()
                     if export_format.SATISFIED_OUTPUT in outputs
                     else np.ones(len(lengths), bool))
        spans = (_span_marginals(outputs) if export_format.NUM_SPANS_OUTPUT in outputs
                 else None)
        return [SentenceError(sentences.UNSATISFIABLE, _UNSATISFIABLE_DETAIL)
                if not satisfied[row] else ParseResult(
            bracketed=trees[row].decode("utf-8"), score=float(scores[row]),
            pos_tags=_decode(pos_tags[row, :n]), leaf_tags=_decode(leaf_tags[row, :n]),
            internal_tags=_decode(internal_tags[row, :n - 1]),
            tree_probability=float(tree_probabilities[row]) if marginals else None,
            constituent_marginals=(tuple(float(p) for p in
                                         constituent_marginals[row, :counts[row]])
                                   if marginals else None),
            k_best=(tuple((tree.decode("utf-8"), float(score)) for tree, score in zip(
                k_best_trees[row, :k_best_counts[row]], k_best_scores[row]))
                    if k_best else None),
            span_marginals=spans[row] if spans is not None else None,
            words=tuple(_decode(words[row, :n])))
            for row, n in enumerate(lengths)]

    def _max_squared_words(self, extra: str | None) -> int | None:
        """parse_span_marginals' bound on a call's sentences × longest words² (None for
        the other signatures)."""
        if extra != export_format.PARSE_SPAN_MARGINALS_SIGNATURE:
            return None
        return export_format.MAX_SPAN_MARGINAL_CELLS // max(
            len(self.phrase_labels), 2 * (self.max_stack_depth + 1))

    def _batches(self, joined: dict[int, str], batch_size: int,
                 max_squared_words: int | None = None) -> list[list[int]]:
        """Sentence indices in batches, shortest sentences first: each one model call.

        A batch holds at most batch_size sentences and max_pieces_per_call //
        max_pieces_per_word words, and (with max_squared_words) at most that many sentences
        × its longest sentence's words², so that it never exceeds the graph's bounds (a
        sentence alone can: its call then fails). Sentences that fit one batch are split
        into up to `concurrent_calls` batches of about equal words, so that every call slot
        has work.
        """
        limits = self._sentence_limits
        max_words = (limits.max_pieces // limits.max_pieces_per_word
                     if limits.max_pieces and limits.max_pieces_per_word else None)
        word_counts = {index: sentence.count(" ") + 1 for index, sentence in joined.items()}
        batches: list[list[int]] = []
        words_in_batch = longest = 0
        for index in sorted(joined, key=lambda i: len(joined[i])):
            count = word_counts[index]
            if not batches or len(batches[-1]) == batch_size or (
                    max_words is not None and words_in_batch + count > max_words) or (
                    max_squared_words is not None and
                    (len(batches[-1]) + 1) * max(longest, count) ** 2 > max_squared_words):
                batches.append([])
                words_in_batch = longest = 0
            batches[-1].append(index)
            words_in_batch += count
            longest = max(longest, count)
        if len(batches) == 1 and self.concurrent_calls > 1 and len(batches[0]) > 1:
            return _split_evenly(batches[0], [word_counts[i] for i in batches[0]],
                                 self.concurrent_calls)
        return batches


def _split_evenly(items: list[int], weights: list[int], parts: int) -> list[list[int]]:
    """Items in min(parts, len(items)) runs, in order, none empty, of about equal weight.

    Run j ends before the first item whose middle lies past (j + 1) / parts of the total
    weight, moved on or back as little as keeps every run non-empty.
    """
    parts = min(parts, len(items))
    total = sum(weights)
    middles = [done - weight / 2 for done, weight in zip(itertools.accumulate(weights), weights)]
    cuts = [0]
    for j in range(1, parts):
        cut = next((i for i, middle in enumerate(middles) if middle >= total * j / parts),
                   len(items))
        cuts.append(min(max(cut, cuts[-1] + 1), len(items) - (parts - j)))
    cuts.append(len(items))
    return [items[start:end] for start, end in zip(cuts, cuts[1:])]


def _in_order(function: Callable[[Any], Any], items: Sequence[Any], in_flight: int
              ) -> Iterator[concurrent.futures.Future]:
    """Runs function on each item, up to in_flight at once on threads, in item order.

    Returns:
      An iterator of futures, one per item in item order, each done when yielded: its
      .result() is the call's result or raises the call's exception. The iterator holds
      the yielded one and at most in_flight running or finished ahead of it; closing it
      early (or an exception from a .result()) cancels what has not started and waits
      for what has.
    """
    if in_flight == 1 or len(items) <= 1:
        for item in items:
            done: concurrent.futures.Future = concurrent.futures.Future()
            try:
                done.set_result(function(item))
            except Exception as e:  # noqa: BLE001 - handed to the caller through .result()
                done.set_exception(e)
            yield done
        return
    remaining = iter(items)
    with concurrent.futures.ThreadPoolExecutor(in_flight, "tetra-parse") as pool:
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


def _refusal(message: str) -> SentenceError:
    """The graph's refusal of one sentence as a SentenceError with its reason."""
    text = _assertion_text(message)
    pieces = re.search(r"holds (\d+) subword pieces; at most (\d+)", text)
    if pieces:
        return SentenceError(sentences.TOO_MANY_PIECES, sentences.too_many_pieces_detail(
            int(pieces.group(1)), int(pieces.group(2))))
    reason, _, detail = text.partition(": ")
    # parse_marginals' and parse_constrained's bound; the graph's checks of constraints.
    if reason in (sentences.TOO_MANY_WORDS, sentences.BAD_CONSTRAINTS) and detail:
        return SentenceError(reason, detail)
    return SentenceError(sentences.REJECTED, text)


def _assertion_text(message: str) -> str:
    """The text of a graph assertion ("... assertion failed: [TEXT] ..." → TEXT)."""
    match = re.search(r"assertion failed: \[(.*?)\]\s*$", message, re.MULTILINE)
    if match:
        return match.group(1)
    return _first_line(message)


def _first_line(message: str) -> str:
    lines = [line for line in message.splitlines() if line.strip()]
    return lines[0] if lines else message


def _span_marginals(outputs: dict) -> list[tuple[Constituent, ...]]:
    """parse_span_marginals' span outputs, as each row's Constituents."""
    counts = outputs[export_format.NUM_SPANS_OUTPUT].numpy()
    starts, ends, labels, probabilities = (outputs[name].numpy()
                                           for name in export_format.SPAN_OUTPUTS)
    return [tuple(Constituent(label.decode("utf-8"), int(start), int(end), float(p))
                  for start, end, label, p in zip(starts[row, :count], ends[row, :count],
                                                  labels[row, :count],
                                                  probabilities[row, :count]))
            for row, count in enumerate(counts)]


def _extra_signature(marginals: bool, k_best: bool, constrained: bool = False,
                     span_marginals: bool = False) -> str | None:
    """The signature that gives what is asked for besides the parse (None: the default)."""
    if (marginals or span_marginals) + k_best + constrained > 1:
        raise ValueError("marginals (or span_marginals), k_best and constraints come from "
                         "different signatures: ask for one")
    if span_marginals:
        return export_format.PARSE_SPAN_MARGINALS_SIGNATURE
    if marginals:
        return export_format.PARSE_MARGINALS_SIGNATURE
    if constrained:
        return export_format.PARSE_CONSTRAINED_SIGNATURE
    return export_format.PARSE_K_BEST_SIGNATURE if k_best else None


def _decode(values: np.ndarray) -> list[str]:
    return [value.decode("utf-8") for value in values]
