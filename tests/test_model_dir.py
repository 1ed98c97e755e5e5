"""Tests for tetra_tf/training/model_dir.py: the model directory's layout and checkpoint resolution."""

import os
import shutil

import pytest

import tensorflow as tf

import tiny_model
from tetra_tf.training import model_dir as model_dir_lib
from tetra_tf.training.model_dir import CONFIG_FILE, ModelDirError, TaggerSpec


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("model"))
    tiny_model.make_model_dir(directory, max_stack_depth=6)
    return directory


def test_spec_round_trips(model_dir, tmp_path):
    spec = TaggerSpec.load(model_dir)
    assert spec.max_stack_depth == 6
    spec.save(str(tmp_path))
    assert TaggerSpec.load(str(tmp_path)) == spec
    with pytest.raises(FileNotFoundError, match="not a tetra-tf model directory"):
        TaggerSpec.load(str(tmp_path / "missing"))


def test_resolve_checkpoint(model_dir, tmp_path):
    best = os.path.join(os.path.normpath(model_dir), "best", "model")
    assert model_dir_lib.resolve_checkpoint(model_dir) == (os.path.normpath(model_dir), best)
    assert model_dir_lib.resolve_checkpoint(best) == (os.path.normpath(model_dir), best)
    with pytest.raises(ModelDirError, match="no such model directory"):
        model_dir_lib.resolve_checkpoint(str(tmp_path / "missing"))
    with pytest.raises(ModelDirError, match="not a tetra-tf model directory"):
        model_dir_lib.resolve_checkpoint(str(tmp_path))
    empty_model = tmp_path / "empty_model"
    empty_model.mkdir()
    shutil.copy(os.path.join(model_dir, CONFIG_FILE), empty_model / CONFIG_FILE)
    with pytest.raises(ModelDirError, match="holds no checkpoint"):
        model_dir_lib.resolve_checkpoint(str(empty_model))


def test_latest_rolling_checkpoint_without_best(model_dir, tmp_path):
    rolling = tmp_path / "rolling"
    shutil.copytree(model_dir, rolling, ignore=shutil.ignore_patterns("best"))
    tagger, _ = model_dir_lib.load_tagger(model_dir, os.path.join(model_dir, "best", "model"))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=tagger), str(rolling / "ckpt"),
                                         max_to_keep=2)
    manager.save(checkpoint_number=5)
    newest = manager.save(checkpoint_number=9)
    assert model_dir_lib.resolve_checkpoint(str(rolling)) == (str(rolling), newest)
    # A checkpoint prefix inside ckpt/ finds its model directory one level up.
    assert model_dir_lib.resolve_checkpoint(newest) == (str(rolling), newest)


def test_load_tagger_restores_the_weights_and_rejects_another_model(model_dir, tmp_path):
    best = os.path.join(model_dir, "best", "model")
    first, _ = model_dir_lib.load_tagger(model_dir, best)
    second, _ = model_dir_lib.load_tagger(model_dir, best)
    assert len(first.weights) == len(second.weights) > 20
    for a, b in zip(first.weights, second.weights):  # same build order, fresh random inits
        tf.debugging.assert_equal(a, b)
    other = tmp_path / "other"
    tiny_model.make_model_dir(str(other))
    spec = TaggerSpec.load(str(other))
    spec.heads.num_pos_tags += 1
    spec.save(str(other))
    with pytest.raises(ModelDirError, match="does not restore"):
        model_dir_lib.load_tagger(str(other), os.path.join(str(other), "best", "model"))
