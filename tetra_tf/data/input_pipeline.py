"""tf.data input: TFRecords of tagged trees → length-bucketed batches of static shape.

Sentences are tokenized into wordpieces with the same tokenizer ops the exported model
uses, then grouped by subword length into buckets whose padded shapes are fixed, so
XLA (and TPUs) see a handful of static shapes and little compute is spent on padding.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from typing import Iterator, Sequence

import numpy as np

import tensorflow as tf

from tetra_tf.data import records
from tetra_tf.data.tokenization import SubwordTokenizer, pack_windows


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """How batches are formed.

    Attributes:
      batch_size: sentences per (global) batch.
      bucket_lengths: padded subword lengths, [CLS] and [SEP] included; a sentence goes
        to the first bucket it fits. None of them may exceed the encoder's positions.
        Narrow buckets waste little compute on padding.
      static_shapes: every batch of a bucket has the same shape (partial batches of
        training are dropped, those of evaluation padded with empty sentences), as XLA
        and TPUs need. Otherwise the last batch of each bucket is smaller.
    """

    batch_size: int = 16
    bucket_lengths: Sequence[int] = (16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 112, 128, 160,
                                     192, 256, 384, 512)
    static_shapes: bool = False


def read_examples(data: str | Sequence[str],
                  teacher_vocab_sizes: dict[str, int] | None = None) -> tf.data.Dataset:
    """Returns the parsed examples of TFRecord directories or globs (one or several, read
    one after the other), in file order; with `teacher_vocab_sizes`, with their teacher's
    log-probabilities (see records.parse_example)."""
    files = [path for one in ([data] if isinstance(data, str) else data)
             for path in records.record_files(one)]
    return tf.data.TFRecordDataset(files).map(
        lambda serialized: records.parse_example(serialized, teacher_vocab_sizes),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def tokenize_examples(dataset: tf.data.Dataset, tokenizer: SubwordTokenizer) -> tf.data.Dataset:
    """Adds `word_pieces` (ragged [(words), (pieces)]) and `num_pieces` to each example."""

    def tokenize(example):
        words = tf.RaggedTensor.from_tensor(example["words"][tf.newaxis])
        pieces = tokenizer.tokenize_words(words)[0]
        example = dict(example)
        example["word_pieces"] = pieces
        example["num_pieces"] = tf.cast(tf.size(pieces.flat_values), tf.int32)
        return example

    return dataset.map(tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


@dataclasses.dataclass
class DataSummary:
    """What one pass over a data set found: sizes per bucket, and the largest tag ids."""

    num_examples: int
    bucket_sizes: list[int]
    too_long: int
    max_tag_ids: dict[str, int]

    def steps_per_epoch(self, config: InputConfig) -> int:
        """Batches of a training epoch."""
        if config.static_shapes:  # Each bucket drops its last partial batch.
            return sum(size // config.batch_size for size in self.bucket_sizes)
        return sum(-(-size // config.batch_size) for size in self.bucket_sizes)


def summarize(dataset: tf.data.Dataset, config: InputConfig) -> DataSummary:
    """Counts a tokenized data set per bucket and finds its largest tag ids."""
    sizes = [0] * len(config.bucket_lengths)
    too_long = 0
    max_ids = collections.defaultdict(lambda: -1)
    lengths = dataset.map(lambda e: {"num_pieces": e["num_pieces"],
                                     **{k: tf.reduce_max(tf.concat([e[k], [-1]], 0))
                                        for k in records.TAG_ID_FEATURES}})
    count = 0
    for item in lengths.as_numpy_iterator():
        count += 1
        bucket = bucket_index(int(item["num_pieces"]), config.bucket_lengths)
        if bucket is None:
            too_long += 1
        else:
            sizes[bucket] += 1
        for key in records.TAG_ID_FEATURES:
            max_ids[key] = max(max_ids[key], int(item[key]))
    return DataSummary(count, sizes, too_long, dict(max_ids))


def bucket_index(num_pieces: int, bucket_lengths: Sequence[int]) -> int | None:
    """Returns the first bucket whose length holds the pieces plus [CLS] and [SEP]."""
    for i, length in enumerate(bucket_lengths):
        if num_pieces + 2 <= length:
            return i
    return None


def _bucket_tensor(num_pieces: tf.Tensor, bucket_lengths: Sequence[int]) -> tf.Tensor:
    limits = tf.constant([length - 2 for length in bucket_lengths], tf.int32)
    return tf.reduce_sum(tf.cast(num_pieces > limits, tf.int32))


def _pack_example(example: dict, tokenizer: SubwordTokenizer, seq_length: int,
                  max_words: int | None, num_windows: int | None) -> dict:
    """Turns one tokenized example into model features and padded labels."""
    pieces = tf.RaggedTensor.from_row_lengths(
        example["word_pieces"], tf.reshape(example["word_pieces"].nrows(), [1]))
    packed = pack_windows(pieces, seq_length, num_windows=num_windows, max_words=max_words,
                          cls_id=tokenizer.cls_id, sep_id=tokenizer.sep_id,
                          pad_id=tokenizer.pad_id)
    features = {key: value[0] for key, value in packed.items()}
    width = tf.shape(features["word_end_positions"])[0]
    for key in records.TAG_ID_FEATURES:
        ids = tf.cast(example[key], tf.int32)
        features[key] = tf.pad(ids, [[0, width - tf.shape(ids)[0]]], constant_values=-1)
        if max_words is not None:
            features[key] = tf.ensure_shape(features[key], [max_words])
    for name in records.TEACHER_LOG_PROBS.values():
        if name in example:  # Padding rows are never scored: their labels are −1.
            log_probs = example[name]
            features[name] = tf.pad(log_probs, [[0, width - tf.shape(log_probs)[0]], [0, 0]])
            if max_words is not None:
                features[name] = tf.ensure_shape(features[name], [max_words, None])
    features["words"] = tf.pad(example["words"], [[0, width - tf.shape(example["words"])[0]]])
    features["tree"] = example["tree"]
    return features


@functools.lru_cache(maxsize=64)
def _packer(tokenizer: SubwordTokenizer, seq_length: int, max_words: int | None,
            num_windows: int | None):
    """`_pack_example` for one shape, as one tf.function shared by every dataset that maps
    it: `Dataset.map` traces its function anew for each dataset (each epoch, each dev
    scoring, each bucket), and packing is slow to trace."""
    return tf.function(lambda example: _pack_example(example, tokenizer, seq_length,
                                                     max_words, num_windows))


def training_dataset(tokenized: tf.data.Dataset, tokenizer: SubwordTokenizer,
                     config: InputConfig, summary: DataSummary, seed: int,
                     skip_batches: int = 0) -> tf.data.Dataset:
    """One epoch of shuffled, bucketed training batches with static shapes.

    Args:
      tokenized: the output of `tokenize_examples` (ideally cached).
      tokenizer: the tokenizer that made it (for its special token ids).
      config: batch size and buckets.
      summary: the data set's `summarize` result, for the mix of buckets.
      seed: the epoch's shuffling seed; the same seed gives the same batches, so a
        resumed run can skip what the killed run had already done.
      skip_batches: how many of the epoch's batches to skip.

    Returns:
      A dataset of dicts: model inputs, labels (−1 where there is none), and the strings
      `words` and `tree`, which the training step must drop before the model.
    """
    per_bucket, weights = [], []
    for i, seq_length in enumerate(config.bucket_lengths):
        size = summary.bucket_sizes[i]
        batches = (size // config.batch_size if config.static_shapes
                   else -(-size // config.batch_size))
        if not batches:
            continue
        bucket = (tokenized
                  .filter(lambda e, i=i: _bucket_tensor(e["num_pieces"], config.bucket_lengths) == i)
                  .shuffle(summary.bucket_sizes[i], seed=seed + i, reshuffle_each_iteration=False)
                  .map(_packer(tokenizer, seq_length, seq_length - 2, 1),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
                  .batch(config.batch_size, drop_remainder=config.static_shapes))
        per_bucket.append(bucket)
        weights.append(float(batches))
    if not per_bucket:
        raise ValueError(f"too few training sentences for one batch of {config.batch_size}")
    mixed = tf.data.Dataset.sample_from_datasets(
        per_bucket, weights=[w / sum(weights) for w in weights], seed=seed,
        stop_on_empty_dataset=False, rerandomize_each_iteration=False)
    return mixed.skip(skip_batches).prefetch(tf.data.AUTOTUNE)


def evaluation_batches(tokenized: tf.data.Dataset, tokenizer: SubwordTokenizer,
                       config: InputConfig, summary: DataSummary) -> Iterator[dict]:
    """Yields every sentence once, in bucketed batches (numpy).

    With static shapes, each bucket's last batch is padded with empty sentences (rows with
    no words). Sentences too long for the largest bucket are split into windows and come
    last, one per batch. `summary` (the data set's `summarize` result) says which buckets
    hold sentences: empty ones are not built, which spares tracing their packing.
    """
    buckets = list(config.bucket_lengths)
    for i, seq_length in enumerate(buckets):
        if not summary.bucket_sizes[i]:
            continue
        bucket = (tokenized
                  .filter(lambda e, i=i: _bucket_tensor(e["num_pieces"], buckets) == i)
                  .map(_packer(tokenizer, seq_length, seq_length - 2, 1))
                  .batch(config.batch_size))
        for batch in bucket.as_numpy_iterator():
            yield pad_batch(batch, config.batch_size) if config.static_shapes else batch
    if not summary.too_long:
        return
    long_ones = (tokenized
                 .filter(lambda e: _bucket_tensor(e["num_pieces"], buckets) == len(buckets))
                 .map(_packer(tokenizer, buckets[-1], None, None))
                 .batch(1))
    yield from long_ones.as_numpy_iterator()


def pad_batch(batch: dict, batch_size: int) -> dict:
    """Pads a numpy batch along its first axis with empty sentences."""
    missing = batch_size - len(batch["num_words"])
    if missing <= 0:
        return batch
    padded = {}
    for key, value in batch.items():
        fill = -1 if key in records.TAG_ID_FEATURES else (b"" if value.dtype.kind in "SO" else 0)
        pad = np.full((missing,) + value.shape[1:], fill, dtype=value.dtype)
        padded[key] = np.concatenate([value, pad])
    return padded
