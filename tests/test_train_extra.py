"""Tests for tetra_tf/train_extra.py: training code gets Keras 2 however a process starts,
and a training program keeps TensorFlow's C++ notices off stderr."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

pytestmark = pytest.mark.slow  # fresh TensorFlow processes

_IMPORT_FIRST = """
import importlib, json, os, sys
importlib.import_module(sys.argv[1])
import tensorflow as tf, tf_keras
print(json.dumps([os.environ.get("TF_USE_LEGACY_KERAS"), os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
                  tf.keras.layers.Layer is tf_keras.layers.Layer]))
"""


def _user_env() -> dict:
    """A user's shell: neither variable set (the tests' setup sets both)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL")}
    env["PYTHONPATH"] = REPO_ROOT
    return env


@pytest.mark.parametrize("module", ["tetra_tf.train", "tetra_tf.export",
                                    "tetra_tf.distillation"])
def test_training_code_imported_first_selects_keras_2(module):
    """tf.keras is tf_keras after a training module is the process's first import; a
    library caller's TensorFlow log level is left alone."""
    result = subprocess.run([sys.executable, "-c", _IMPORT_FIRST, module], capture_output=True,
                            text=True, env=_user_env(), cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == ["1", None, True]


def test_a_training_program_starts_quietly():
    """`python -m tetra_tf.export --help`: TensorFlow loads (and Keras 2 is selected) with
    its C++ start-up notices kept off stderr."""
    result = subprocess.run([sys.executable, "-m", "tetra_tf.export", "--help"],
                            capture_output=True, text=True, env=_user_env(), cwd=REPO_ROOT,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--export_dir" in result.stdout
    assert result.stderr == ""
