"""Module paths from before the package's layers keep working for a release: each warns once
(FutureWarning) and gives the moved module itself (tetra_tf/_moved/)."""

import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

MOVED_DIR = os.path.join(REPO_ROOT, "tetra_tf", "_moved")
OLD_PATHS = sorted(name[:-3] for name in os.listdir(MOVED_DIR)
                   if name.endswith(".py") and name != "__init__.py")

_CHECK = """
import importlib, json, sys, warnings
results = []
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("default")
    import tetra_tf.sentences as old
    from tetra_tf import sentences as attribute
    results.append([old.__name__, old is attribute, len(caught)])
    import tetra_tf.tags as old
    again = importlib.import_module("tetra_tf.tags")
    results.append([old.__name__, old is again, len(caught)])
    from tetra_tf.spacy_component import TetraTfComponent
    results.append([TetraTfComponent.__module__, True, len(caught)])
print(json.dumps([results, [(w.category.__name__, str(w.message), w.filename)
                            for w in caught]]))
"""


def _run(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=REPO_ROOT, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()[-1]


def test_the_documented_old_paths_are_kept():
    assert {"sentences", "text", "export_format", "parse_record", "constraints", "drawing",
            "beam", "spark", "spacy_component", "treebank", "tags"} <= set(OLD_PATHS)


def test_an_old_path_warns_once_and_is_the_new_module():
    """Three ways to import an old path (a module, a name of the package, a name from the
    module): each gives the moved module itself, each warns once, from the caller's line."""
    import json  # noqa: PLC0415

    results, warned = json.loads(_run(_CHECK))
    assert results == [["tetra_tf.contract.sentences", True, 1],
                       ["tetra_tf.trees.tags", True, 2],
                       ["tetra_tf.integrations.spacy_component", True, 3]]
    assert [(category, message) for category, message, _ in warned] == [
        ("FutureWarning", f"tetra_tf.{old} moved to {new}; the old path goes away in "
                          "tetra-tf 0.3")
        for old, new in [("sentences", results[0][0]), ("tags", results[1][0]),
                         ("spacy_component", results[2][0])]]
    assert {filename for _, _, filename in warned} == {"<string>"}  # not the shim's line


@pytest.mark.parametrize("old", OLD_PATHS)
def test_every_old_path_names_an_existing_module(old):
    with open(os.path.join(MOVED_DIR, old + ".py"), encoding="utf-8") as f:
        source = f.read()
    new = source.split('_moved.alias(__name__, "')[1].split('"')[0]
    parts = new.split(".")
    assert parts[-1] == old and len(parts) == 3
    assert os.path.isfile(os.path.join(REPO_ROOT, *parts) + ".py")


def test_a_program_forwards_its_moved_library_with_one_warning():
    """`from tetra_tf.evalb import evaluate_lines` (the scorer's library moved to
    tetra_tf.trees.evalb; the program stays): the names work, one warning."""
    code = ("import json, warnings\nwith warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('default')\n"
            "    from tetra_tf.evalb import evaluate_lines, tree_to_line\n"
            "    from tetra_tf.trees import evalb\n"
            "print(json.dumps([evaluate_lines is evalb.evaluate_lines, "
            "[str(w.message) for w in caught]]))")
    import json  # noqa: PLC0415

    same, messages = json.loads(_run(code))
    assert same
    assert messages == ["tetra_tf.evalb.evaluate_lines moved to "
                        "tetra_tf.trees.evalb.evaluate_lines; the old path goes away in "
                        "tetra-tf 0.3"]


def test_a_missing_name_of_a_program_is_an_attribute_error():
    code = ("import tetra_tf.evalb\ntry:\n    tetra_tf.evalb.no_such_name\n"
            "except AttributeError as e:\n    print(e)")
    assert _run(code) == "module 'tetra_tf.evalb' has no attribute 'no_such_name'"
