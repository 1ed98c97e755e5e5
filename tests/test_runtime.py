"""The runtime is only a runtime: every way in to parsing imports no training code, and a
training program without the [train] extra stops with one line (tetra_tf/extras.py)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

# What `pip install 'tetra-tf[train]'` adds: made unimportable in the child, as on a
# runtime-only install.
TRAINING_PACKAGES = ("tf_keras", "official")
# Training code, by folder: the training and SavedModel-building layers, the training
# programs, and the training input pipeline.
TRAINING_FOLDERS = ("tetra_tf.training", "tetra_tf.savedmodel")
TRAINING_MODULES = ("tetra_tf.train", "tetra_tf.export", "tetra_tf.distillation",
                    "tetra_tf.data.input_pipeline")


def is_training_code(module: str) -> bool:
    return module in TRAINING_MODULES or any(
        module == folder or module.startswith(folder + ".") for folder in TRAINING_FOLDERS)


# Each way in (the CLIs beam_parse and spark_parse import beam and spark when they run). All
# but spaCy's write bracketed strings and start without nltk (about 1.5 s of imports with
# its optional scientific stack): it loads when a caller first asks for an nltk.Tree.
RUNTIME_MODULES = ("tetra_tf.parser", "tetra_tf.parse", "tetra_tf.serving.main",
                   "tetra_tf.integrations.beam", "tetra_tf.integrations.spark",
                   "tetra_tf.integrations.spacy_component")
WITHOUT_NLTK = RUNTIME_MODULES[:-1]

_IMPORT_AND_LIST = """
import importlib, json, sys
for name in {blocked!r}:
    sys.modules[name] = None  # as if not installed: importing it raises ImportError
for module in {modules!r}:
    importlib.import_module(module)
    print(json.dumps(sorted(name for name, loaded in sys.modules.items() if loaded is not None)))
"""


def _runtime_env() -> dict:
    """The environment of a user's shell: no TF_USE_LEGACY_KERAS from the test setup."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def _import_and_list(modules) -> list[set[str]]:
    """Imports the modules one after another in a fresh process with the training packages
    blocked; returns the modules loaded after each (each includes the ones before)."""
    code = _IMPORT_AND_LIST.format(blocked=TRAINING_PACKAGES, modules=tuple(modules))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_runtime_env(), cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return [set(json.loads(line)) for line in result.stdout.strip().splitlines()[-len(modules):]]


@pytest.mark.slow
def test_parse_path_imports_no_training_code():
    """Every way in, imported one after another: what all of them load holds no training
    module, so neither does what any one loads."""
    loaded_after = _import_and_list(RUNTIME_MODULES)
    for module, loaded in zip(RUNTIME_MODULES, loaded_after):
        assert module in loaded
    loaded = loaded_after[-1]
    assert not {name for name in loaded if is_training_code(name)}
    assert not {name for name in loaded if name.split(".")[0] in TRAINING_PACKAGES}
    assert "nltk" not in loaded_after[len(WITHOUT_NLTK) - 1]
    assert "nltk" in loaded  # (spaCy's component: the check above would see it)


def test_importing_the_package_changes_nothing_in_the_process():
    """`import tetra_tf` sets no environment variable (Keras 2 is selected where training
    code is imported, tetra_tf.train_extra) and loads no TensorFlow."""
    env = {k: v for k, v in _runtime_env().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    code = ("import json, os, sys\nbefore = dict(os.environ)\nimport tetra_tf\n"
            "print(json.dumps([dict(os.environ) == before, 'tensorflow' in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == [True, False]


def test_the_block_would_see_a_training_import():
    """The check above can fail: importing the trainer under the same block fails."""
    code = _IMPORT_AND_LIST.format(blocked=TRAINING_PACKAGES,
                                   modules=("tetra_tf.training.model_dir",))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_runtime_env(), cwd=REPO_ROOT, timeout=300)
    assert result.returncode != 0
    assert "pip install 'tetra-tf[train]'" in result.stderr


@pytest.mark.parametrize("program, extra, missing, name", [
    ("tetra_tf.train", "train", "tf_keras", "python -m tetra_tf.train"),
    ("tetra_tf.export", "train", "tf_keras", "python -m tetra_tf.export"),
    ("tetra_tf.beam_parse", "beam", "apache_beam", "python -m tetra_tf.beam_parse"),
    ("tetra_tf.spark_parse", "spark", "pyspark", "python -m tetra_tf.spark_parse"),
    ("tetra_tf.serving.main", "serving", "waitress", "the tetra-tf server"),
])
def test_programs_without_their_extra_say_so_in_one_line(program, extra, missing, name):
    # As `python -m program` runs it (alter_sys: the program is the process's __main__).
    code = ("import runpy, sys\n"
            f"sys.modules[{missing!r}] = None\n"
            f"sys.argv = [{program!r}]\n"
            f"runpy.run_module({program!r}, run_name='__main__', alter_sys=True)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_runtime_env(), cwd=REPO_ROOT, timeout=300)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {name} needs tetra-tf's [{extra}] extra (not installed: "
        f"{missing}): pip install 'tetra-tf[{extra}]'"]
