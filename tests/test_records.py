"""Tests for tetra_tf.data.records: the tf.train.Example schema, writing and parsing."""

import fnmatch
import os

import nltk
import numpy as np
import pytest
import tensorflow as tf

from tetra_tf.data import records
from tetra_tf.trees import tags, treebank

TREES = [
    "(TOP (S (S (NP (PRP She)) (VP (VBZ enjoys) (S (VP (VBG playing) (NP (NN tennis)))))) "
    "(. .)))",
    "(TOP (NP (-LRB- -LRB-) (NN café) (-RRB- -RRB-)))",
    "(TOP (INTJ (UH Hi)))",
    "(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))",
]


def _tagged():
    trees = [nltk.Tree.fromstring(s) for s in TREES]
    taggings = [tags.tree_to_tags(t) for t in trees]
    return trees, taggings


def test_make_and_parse_example_round_trip():
    trees, taggings = _tagged()
    vocabs = tags.TagVocabularies.build(taggings[:1])  # Later sentences have unknown tags.
    serialized = []
    for tree, t in zip(trees, taggings):
        example = records.make_example(t, vocabs.encode(t, unknown=records.UNKNOWN_TAG_ID),
                                       treebank.tree_to_line(tree))
        serialized.append(example.SerializeToString())
    dataset = tf.data.Dataset.from_tensor_slices(serialized).map(records.parse_example)
    spec = dataset.element_spec
    assert spec[records.WORDS].dtype == tf.string and spec[records.WORDS].shape.rank == 1
    for name in records.TAG_ID_FEATURES:
        assert spec[name].dtype == tf.int32 and spec[name].shape.rank == 1
    assert spec[records.TREE].dtype == tf.string and spec[records.TREE].shape.rank == 0

    for tree, t, features in zip(trees, taggings, dataset):
        assert [w.decode("utf-8") for w in features[records.WORDS].numpy()] == list(t.words)
        expected = vocabs.encode(t)
        for name in records.TAG_ID_FEATURES:
            assert features[name].numpy().tolist() == expected[name]
        assert features[records.INTERNAL_TAG_IDS].shape[0] == len(t.words) - 1
        line = features[records.TREE].numpy().decode("utf-8")
        assert nltk.Tree.fromstring(line) == tree
    # The unknown tags are really stored as -1.
    last = list(dataset)[-1]
    assert -1 in last[records.POS_TAG_IDS].numpy().tolist()


def test_make_example_checks_lengths():
    _, taggings = _tagged()
    t = taggings[0]
    ids = tags.TagVocabularies.build(taggings).encode(t)
    bad = dict(ids, internal_tag_ids=ids["internal_tag_ids"][:-1])
    with pytest.raises(ValueError, match="internal_tag_ids"):
        records.make_example(t, bad, "(TOP)")
    with pytest.raises(ValueError, match="lacks"):
        records.make_example(t, {"pos_tag_ids": ids["pos_tag_ids"]}, "(TOP)")
    with pytest.raises(ValueError, match="one line"):
        records.make_example(t, ids, "(TOP\n)")


def test_write_records_shards_keep_order(tmp_path):
    trees, taggings = _tagged()
    vocabs = tags.TagVocabularies.build(taggings)
    examples = [records.make_example(t, vocabs.encode(t), treebank.tree_to_line(tree))
                for tree, t in zip(trees, taggings)]
    paths = records.write_records(examples, str(tmp_path), num_shards=3)
    assert [os.path.basename(p) for p in paths] == [
        "records-00000-of-00003.tfrecord", "records-00001-of-00003.tfrecord",
        "records-00002-of-00003.tfrecord"]
    assert records.record_files(str(tmp_path)) == paths
    dataset = tf.data.TFRecordDataset(records.record_files(str(tmp_path))).map(
        records.parse_example)
    lines = [f[records.TREE].numpy().decode("utf-8") for f in dataset]
    assert lines == [treebank.tree_to_line(t) for t in trees]
    with pytest.raises(ValueError):
        records.write_records(examples, str(tmp_path), num_shards=0)


def test_record_file_name_and_pattern():
    name = records.record_file_name(0, 4)
    assert name == "records-00000-of-00004.tfrecord"
    assert fnmatch.fnmatch(name, records.RECORD_FILE_PATTERN)
    with pytest.raises(ValueError):
        records.record_file_name(4, 4)


def test_record_files_errors_and_globs(tmp_path):
    with pytest.raises(FileNotFoundError, match="convert_ptb"):
        records.record_files(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        records.record_files(str(tmp_path / "nothing-*.tfrecord"))
    (tmp_path / "records-00001-of-00002.tfrecord").write_bytes(b"")
    (tmp_path / "records-00000-of-00002.tfrecord").write_bytes(b"")
    (tmp_path / "other.tfrecord").write_bytes(b"")
    expected = [str(tmp_path / f"records-0000{i}-of-00002.tfrecord") for i in (0, 1)]
    assert records.record_files(str(tmp_path)) == expected
    assert records.record_files(str(tmp_path / "*.tfrecord")) == sorted(
        expected + [str(tmp_path / "other.tfrecord")])


def test_teacher_log_probabilities_round_trip_and_are_checked():
    trees, taggings = _tagged()
    vocabs = tags.TagVocabularies.build(taggings)
    t = taggings[0]
    example = records.make_example(t, vocabs.encode(t), treebank.tree_to_line(trees[0]))
    n = len(t.words)
    sizes = records.tag_vocabulary_sizes(vocabs)
    rng = np.random.default_rng(0)
    log_probs = {key: rng.normal(size=(n - 1 if key == records.INTERNAL_TAG_IDS else n, size))
                 for key, size in sizes.items()}
    taught = records.add_teacher_log_probs(example, log_probs)
    assert not example.features.feature[records.TEACHER_LOG_PROBS[records.LEAF_TAG_IDS]
                                        ].float_list.value  # the input is left as it was
    parsed = records.parse_example(taught.SerializeToString(), sizes)
    for key, name in records.TEACHER_LOG_PROBS.items():
        np.testing.assert_allclose(parsed[name].numpy(), log_probs[key], rtol=1e-6)
    # Without sizes the same record parses as any other.
    assert set(records.parse_example(taught.SerializeToString())) == set(
        records.parse_example(example.SerializeToString()))
    short = dict(log_probs, **{records.INTERNAL_TAG_IDS: log_probs[records.INTERNAL_TAG_IDS][:-1]})
    with pytest.raises(ValueError, match="internal_tag_ids"):
        records.add_teacher_log_probs(example, short)
