"""Tests for tetra_tf.distillation: folds, teacher log-probabilities, a student trained on them."""

import os

import numpy as np
import pytest

import tensorflow as tf

from conftest import convert, run_cli
from tetra_tf import errors
from tetra_tf.data import input_pipeline, records
from tetra_tf.training import distillation
from tetra_tf.training import trainer as train
from tetra_tf.trees.tags import TagVocabularies


def _serialized(directory):
    files = records.record_files(directory)
    return [bytes(r) for r in tf.data.TFRecordDataset(files).as_numpy_iterator()]


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _teacher_examples(directory):
    sizes = records.tag_vocabulary_sizes(TagVocabularies.load(directory))
    return list(input_pipeline.read_examples(directory, sizes).as_numpy_iterator())


def test_folds_partition_the_sentences_in_order(small_data_dirs, tmp_path):
    source = small_data_dirs["train"]
    fold_dirs = distillation.split_folds(source, 3, str(tmp_path / "folds"))
    assert fold_dirs == [str(tmp_path / "folds" / f"fold{k}") for k in range(3)]
    sizes = [len(_serialized(d)) for d in fold_dirs]
    assert max(sizes) - min(sizes) <= 1
    assert sum((_serialized(d) for d in fold_dirs), []) == _serialized(source)
    assert (sum((_lines(os.path.join(d, "trees.txt")) for d in fold_dirs), [])
            == _lines(os.path.join(source, "trees.txt")))
    for directory in fold_dirs:
        assert TagVocabularies.load(directory) == TagVocabularies.load(source)
        assert not records.has_teacher_log_probs(directory)


def test_folds_keep_their_sources_licence_for_the_model_card(small_data_dirs, tmp_path):
    import json
    import shutil

    from tetra_tf.training import model_card
    from tetra_tf.trees import treebank

    source = str(tmp_path / "train")
    shutil.copytree(small_data_dirs["train"], source)
    with open(os.path.join(source, distillation.STATS_FILE), "w") as f:
        json.dump({"input": "NLTK sample train", "licence": treebank.NLTK_SAMPLE_LICENCE}, f)
    fold_dirs = distillation.split_folds(source, 2, str(tmp_path / "folds"))
    stats = [model_card._data_stats(d) for d in fold_dirs]
    assert [s["licence"] for s in stats] == [treebank.NLTK_SAMPLE_LICENCE] * 2
    assert [s["input"] for s in stats] == ["NLTK sample train (fold 0 of 2)",
                                           "NLTK sample train (fold 1 of 2)"]
    assert sum(s["trees_written"] for s in stats) == len(_serialized(source))
    joined = model_card._data_stats(",".join([fold_dirs[0], small_data_dirs["dev"]]))
    assert joined["licence"] == treebank.NLTK_SAMPLE_LICENCE  # one part's licence binds all


@pytest.fixture(scope="module")
def taught_dev(trained_run, small_data_dirs, tmp_path_factory):
    """The dev records labelled by the trained run's kept weights."""
    output = str(tmp_path_factory.mktemp("taught") / "dev")
    count = distillation.write_teacher_data(small_data_dirs["dev"], [trained_run["model_dir"]],
                                            output, progress=False)
    return {"dir": output, "count": count}


def test_teacher_records_keep_the_sentences_and_add_distributions(taught_dev, small_data_dirs):
    source = small_data_dirs["dev"]
    assert taught_dev["count"] == len(_serialized(source))
    assert records.has_teacher_log_probs(taught_dev["dir"])
    assert _lines(os.path.join(taught_dev["dir"], "trees.txt")) == _lines(
        os.path.join(source, "trees.txt"))
    plain = list(input_pipeline.read_examples(source).as_numpy_iterator())
    taught = _teacher_examples(taught_dev["dir"])
    assert len(taught) == len(plain)
    sizes = records.tag_vocabulary_sizes(TagVocabularies.load(source))
    for before, after in zip(plain, taught):
        for key in (records.WORDS, records.TREE) + records.TAG_ID_FEATURES:
            np.testing.assert_array_equal(before[key], after[key])
        for key, name in records.TEACHER_LOG_PROBS.items():
            log_probs = after[name]
            assert log_probs.shape == (len(before[key]), sizes[key])
            np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, rtol=1e-4)


def test_teacher_pos_distribution_gives_the_teachers_own_pos_tags(taught_dev, trained_run,
                                                                    small_data_dirs):
    """The stored distributions are the teacher's: their argmax is what it parses with."""
    vocabs = TagVocabularies.load(small_data_dirs["dev"])
    _, parsed = train.parse_data(trained_run["model_dir"], small_data_dirs["dev"])
    parsed_pos = {tuple(w for w, _ in tree.pos()): [t for _, t in tree.pos()] for tree in parsed}
    for example in _teacher_examples(taught_dev["dir"]):
        words = tuple(w.decode("utf-8") for w in example[records.WORDS])
        argmax = example[records.TEACHER_LOG_PROBS[records.POS_TAG_IDS]].argmax(-1)
        assert [vocabs.pos.tag(i) for i in argmax] == parsed_pos[words]


def test_several_teachers_average_their_log_probabilities(trained_run, small_data_dirs):
    """Two teachers (the kept weights and an earlier checkpoint): the renormalized mean."""
    model_dir = trained_run["model_dir"]
    earlier = sorted(tf.train.get_checkpoint_state(
        os.path.join(model_dir, "ckpt")).all_model_checkpoint_paths)[0]
    data = small_data_dirs["dev"]
    first = distillation.teacher_scores(model_dir, data, progress=False)
    second = distillation.teacher_scores(earlier, data, progress=False)
    both = distillation.mean_log_probs(iter([first, second]))
    assert both.keys() == first.keys() == second.keys()
    differs = False
    for words, per_key in both.items():
        for key, log_probs in per_key.items():
            assert log_probs.dtype == np.float32
            mean = (first[words][key] + second[words][key]) / 2
            expected = mean - np.log(np.exp(mean).sum(-1, keepdims=True))
            np.testing.assert_allclose(log_probs, expected, atol=1e-5)
            differs |= not np.allclose(first[words][key], second[words][key], atol=1e-3)
    assert differs, "the two checkpoints scored alike: the test would not see an average"
    # One teacher's mean is its own log-probabilities, as write_teacher_data stores them.
    alone = distillation.mean_log_probs([first])
    for words, per_key in alone.items():
        for key, log_probs in per_key.items():
            np.testing.assert_allclose(log_probs, first[words][key], atol=1e-5)


def test_student_learns_its_teachers_distributions(taught_dev, tiny_encoder_dir,
                                                  small_data_dirs, tmp_path):
    """At weight 1 the loss is the cross-entropy to the teacher alone: it falls as the
    student trains on the labelled records."""
    data = taught_dev["dir"]
    config = train.TrainingConfig(batch_size=8, epochs=3, warmup_steps=1, learning_rate=1e-3,
                                  distillation_weight=1.0)
    summary = train.train(data, None, str(tmp_path / "student"), config,
                          tf.distribute.get_strategy(), encoder_path=tiny_encoder_dir,
                          progress=False)
    losses = [epoch["train_loss"] for epoch in summary["history"]]
    assert len(losses) == 3 and losses[-1] < losses[0], losses


class TestCommandLine:
    def test_splits_and_labels(self, trained_run, small_data_dirs, tmp_path):
        result = run_cli(distillation.define_flags, distillation.main,
                         f"--data={small_data_dirs['dev']}", "--folds=2",
                         f"--output_dir={tmp_path / 'folds'}")
        assert result.returncode == 0, result.stderr[-2000:]
        assert "wrote 2 folds" in result.stdout
        fold0 = tmp_path / "folds" / "fold0"
        result = run_cli(distillation.define_flags, distillation.main, f"--data={fold0}",
                         f"--teachers={trained_run['model_dir']}",
                         f"--output_dir={tmp_path / 'taught'}", "--noprogress")
        assert result.returncode == 0, result.stderr[-2000:]
        count = len(_serialized(str(fold0)))
        assert f"wrote {count} sentences" in result.stdout
        assert len(_teacher_examples(str(tmp_path / "taught"))) == count

    def test_a_mistake_is_one_line(self, small_data_dirs, tmp_path):
        result = run_cli(distillation.define_flags, distillation.main,
                         f"--data={small_data_dirs['dev']}", f"--output_dir={tmp_path / 'out'}",
                         "--folds=2", "--teachers=somewhere",
                         flag_names=distillation.FLAG_NAMES)
        assert result.returncode == 2
        assert result.stderr.strip() == ("error: give exactly one of --folds and --teachers "
                                         "(see --help)")
        # The library's error names its parameters; the program says its flags.
        for folds, message in (("1", "--folds=1: at least 2"),
                               ("25", f"--data: {small_data_dirs['dev']} has 24 sentences, "
                                      "fewer than 25 folds")):
            result = run_cli(distillation.define_flags, distillation.main,
                             f"--data={small_data_dirs['dev']}",
                             f"--output_dir={tmp_path / 'out'}", f"--folds={folds}",
                             flag_names=distillation.FLAG_NAMES)
            assert result.returncode == 2
            assert result.stderr.splitlines() == [f"error: {message}"]


class TestMistakes:
    def test_one_fold(self, small_data_dirs, tmp_path):
        with pytest.raises(errors.InputError, match="^num_folds=1: at least 2$"):
            distillation.split_folds(small_data_dirs["dev"], 1, str(tmp_path))

    def test_more_folds_than_sentences(self, small_data_dirs, tmp_path):
        with pytest.raises(errors.InputError,
                           match="^data_dir: .* has 24 sentences, fewer than 25 folds$"):
            distillation.split_folds(small_data_dirs["dev"], 25, str(tmp_path))

    def test_output_over_the_input(self, trained_run, small_data_dirs):
        with pytest.raises(errors.InputError, match="^output_dir=.* is an input directory"):
            distillation.write_teacher_data(small_data_dirs["dev"], [trained_run["model_dir"]],
                                            small_data_dirs["dev"], progress=False)

    def test_no_such_teacher(self, small_data_dirs, tmp_path):
        with pytest.raises(errors.ModelDirError, match="no such model directory"):
            distillation.write_teacher_data(small_data_dirs["dev"], [str(tmp_path / "none")],
                                            str(tmp_path / "out"), progress=False)

    def test_teacher_of_another_vocabulary(self, trained_run, small_data_dirs, tmp_path):
        other = tmp_path / "own_vocab"
        convert(os.path.join(small_data_dirs["dev"], "trees.txt"), other)
        with pytest.raises(errors.InputError, match="^data_dir: .* another tag vocabulary"):
            distillation.write_teacher_data(str(other), [trained_run["model_dir"]],
                                            str(tmp_path / "out"), progress=False)
        assert not os.path.exists(tmp_path / "out")
