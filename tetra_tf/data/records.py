"""The tf.train.Example schema of a tagged sentence, shared by the converter and the reader.

One Example per sentence of n words:

* ``words``: bytes_list, n verbatim PTB tokens (escaped: -LRB-, ``, …);
* ``pos_tag_ids``: int64_list, n;
* ``leaf_tag_ids``: int64_list, n;
* ``internal_tag_ids``: int64_list, n − 1;
* ``tree``: bytes_list, 1: the cleaned gold tree on one line, ``(TOP (S ...))``.

Records for distillation (tetra_tf/distillation.py) also hold a teacher's tag
log-probabilities per head: ``teacher_leaf_log_probs`` (n × leaf tags),
``teacher_internal_log_probs`` ((n − 1) × internal tags) and ``teacher_pos_log_probs``
(n × POS tags), float_lists in row-major order; their directory holds TEACHER_FILE.

Tag ids index the tag vocabularies saved next to the records (tags.TagVocabularies); a tag
unseen in the training vocabulary is stored as UNKNOWN_TAG_ID (−1). Records are sharded
as ``records-00000-of-00004.tfrecord`` and so on.
"""

from __future__ import annotations

import glob
import os
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from tetra_tf.trees.tags import TagVocabularies, TetraTags

WORDS = "words"
POS_TAG_IDS = "pos_tag_ids"
LEAF_TAG_IDS = "leaf_tag_ids"
INTERNAL_TAG_IDS = "internal_tag_ids"
TREE = "tree"
TAG_ID_FEATURES = (POS_TAG_IDS, LEAF_TAG_IDS, INTERNAL_TAG_IDS)

# The teacher's log-probabilities of each head, keyed by the head's gold tag ids.
TEACHER_LOG_PROBS = {LEAF_TAG_IDS: "teacher_leaf_log_probs",
                     INTERNAL_TAG_IDS: "teacher_internal_log_probs",
                     POS_TAG_IDS: "teacher_pos_log_probs"}
# In a directory of records with teacher log-probabilities: which data, which teachers.
TEACHER_FILE = "teacher.json"

UNKNOWN_TAG_ID = -1

RECORD_FILE_PATTERN = "records-*-of-*.tfrecord"
_RECORD_FILE_FORMAT = "records-{shard:05d}-of-{num_shards:05d}.tfrecord"

FEATURE_SPEC = {
    WORDS: tf.io.VarLenFeature(tf.string),
    POS_TAG_IDS: tf.io.VarLenFeature(tf.int64),
    LEAF_TAG_IDS: tf.io.VarLenFeature(tf.int64),
    INTERNAL_TAG_IDS: tf.io.VarLenFeature(tf.int64),
    TREE: tf.io.FixedLenFeature([], tf.string),
}


def record_file_name(shard: int, num_shards: int) -> str:
    """Returns the file name of one shard, e.g. records-00000-of-00004.tfrecord."""
    if not 0 <= shard < num_shards:
        raise ValueError(f"shard {shard} out of range for {num_shards} shards")
    return _RECORD_FILE_FORMAT.format(shard=shard, num_shards=num_shards)


def _bytes_feature(values: Sequence[bytes]) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def _int64_feature(values: Sequence[int]) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def make_example(tags: TetraTags, tag_ids: Mapping[str, Sequence[int]],
                 tree_line: str) -> tf.train.Example:
    """Builds the Example of one sentence.

    Args:
      tags: the sentence's tetra-tags (for the words and the lengths).
      tag_ids: pos_tag_ids, leaf_tag_ids and internal_tag_ids, as given by
        TagVocabularies.encode(tags, unknown=UNKNOWN_TAG_ID).
      tree_line: the cleaned gold tree on one line.

    Raises:
      ValueError: if a length disagrees with the number of words, or the tree is not one line.
    """
    n = len(tags.words)
    expected = {POS_TAG_IDS: n, LEAF_TAG_IDS: n, INTERNAL_TAG_IDS: n - 1}
    for name, length in expected.items():
        if name not in tag_ids:
            raise ValueError(f"tag_ids lacks {name}")
        if len(tag_ids[name]) != length:
            raise ValueError(f"{name} has {len(tag_ids[name])} ids for {n} words")
    if "\n" in tree_line:
        raise ValueError("the tree must be on one line")
    features = {
        WORDS: _bytes_feature([word.encode("utf-8") for word in tags.words]),
        **{name: _int64_feature(tag_ids[name]) for name in TAG_ID_FEATURES},
        TREE: _bytes_feature([tree_line.encode("utf-8")]),
    }
    return tf.train.Example(features=tf.train.Features(feature=features))


def tag_vocabulary_sizes(vocabs: TagVocabularies) -> dict[str, int]:
    """The size of each tag id feature's vocabulary, keyed like TAG_ID_FEATURES."""
    return {LEAF_TAG_IDS: len(vocabs.leaf), INTERNAL_TAG_IDS: len(vocabs.internal),
            POS_TAG_IDS: len(vocabs.pos)}


def add_teacher_log_probs(example: tf.train.Example,
                          log_probs: Mapping[str, np.ndarray]) -> tf.train.Example:
    """Returns a copy of a sentence's Example with a teacher's log-probabilities.

    Args:
      example: the sentence's Example (as make_example built it).
      log_probs: per tag id feature (LEAF_TAG_IDS, ...), float [rows, tags] with as many
        rows as the feature has ids.

    Raises:
      ValueError: if a feature is missing or its rows disagree with the tag ids.
    """
    copy = tf.train.Example()
    copy.CopyFrom(example)
    feature = copy.features.feature
    for key, name in TEACHER_LOG_PROBS.items():
        if key not in log_probs:
            raise ValueError(f"log_probs lacks {key}")
        values = np.asarray(log_probs[key], dtype=np.float32)
        rows = len(feature[key].int64_list.value)
        if values.ndim != 2 or values.shape[0] != rows:
            raise ValueError(f"{key}: {values.shape} log-probabilities for {rows} tags")
        feature[name].float_list.value[:] = values.reshape(-1).tolist()
    return copy


def parse_example(serialized: tf.Tensor,
                  teacher_vocab_sizes: Mapping[str, int] | None = None) -> dict[str, tf.Tensor]:
    """Parses one serialized Example; usable in tf.data.Dataset.map.

    Args:
      serialized: the Example's bytes.
      teacher_vocab_sizes: per tag id feature, its vocabulary's size: also parse the
        teacher's log-probabilities (records for distillation). None: ignore them.

    Returns:
      words: tf.string [n]; pos_tag_ids, leaf_tag_ids: tf.int32 [n]; internal_tag_ids:
      tf.int32 [n − 1]; tree: tf.string scalar; with teacher_vocab_sizes, the
      TEACHER_LOG_PROBS features, float32 [rows of the tag ids, tags].
    """
    spec = dict(FEATURE_SPEC)
    if teacher_vocab_sizes is not None:
        spec.update({name: tf.io.VarLenFeature(tf.float32)
                     for name in TEACHER_LOG_PROBS.values()})
    parsed = tf.io.parse_single_example(serialized, spec)
    features = {WORDS: tf.sparse.to_dense(parsed[WORDS], default_value=b"")}
    for name in TAG_ID_FEATURES:
        features[name] = tf.cast(tf.sparse.to_dense(parsed[name]), tf.int32)
    features[TREE] = parsed[TREE]
    if teacher_vocab_sizes is not None:
        for key, name in TEACHER_LOG_PROBS.items():
            features[name] = tf.reshape(tf.sparse.to_dense(parsed[name]),
                                        [-1, teacher_vocab_sizes[key]])
    return features


def has_teacher_log_probs(directory: str) -> bool:
    """Whether a records directory was written for distillation (holds TEACHER_FILE)."""
    return os.path.isfile(os.path.join(directory, TEACHER_FILE))


def record_files(directory_or_glob: str) -> list[str]:
    """Returns the sorted record shards in a directory (RECORD_FILE_PATTERN) or matching a glob.

    Raises:
      FileNotFoundError: if none is found.
    """
    if os.path.isdir(directory_or_glob):
        pattern = os.path.join(directory_or_glob, RECORD_FILE_PATTERN)
    else:
        pattern = directory_or_glob
    paths = sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    if not paths:
        raise FileNotFoundError(
            f"no TFRecord files match {pattern!r} (write them with tools/convert_ptb.py)")
    return paths


def write_records(examples: Sequence[tf.train.Example], directory: str,
                  num_shards: int = 1) -> list[str]:
    """Writes examples to `num_shards` shards in contiguous runs, keeping their order.

    Reading the returned files in order gives the examples back in the order given.

    Returns:
      The paths written, in shard order.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be at least 1, got {num_shards}")
    os.makedirs(directory, exist_ok=True)
    paths = []
    for shard in range(num_shards):
        begin = shard * len(examples) // num_shards
        end = (shard + 1) * len(examples) // num_shards
        path = os.path.join(directory, record_file_name(shard, num_shards))
        with tf.io.TFRecordWriter(path) as writer:
            for example in examples[begin:end]:
                writer.write(example.SerializeToString())
        paths.append(path)
    return paths
