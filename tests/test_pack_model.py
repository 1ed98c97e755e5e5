"""tools/pack_model.py: an export packed with its card, which must state its data's licence,
and the packed model's trees compared with the source export's."""

import json
import os
import shutil
import sys

import pytest

from conftest import load_tool, run_cli
from tetra_tf import packaged_models
from tetra_tf.contract import export_format
from tetra_tf.trees import treebank

sys.path.insert(0, os.path.dirname(__file__))
import tiny_model  # noqa: E402


pack_model = load_tool("pack_model")


@pytest.fixture
def licensed_export(tiny_export_dir, tmp_path):
    """The tiny export, its card saying it trained on the NLTK sample."""
    export = str(tmp_path / "export" / "1")
    shutil.copytree(tiny_export_dir, export)
    path = os.path.join(export, export_format.CARD_FILE)
    with open(path) as f:
        card = json.load(f)
    card["training"] = {"train_data": {"path": "data/ptb_sample/train",
                                       "licence": treebank.NLTK_SAMPLE_LICENCE}}
    with open(path, "w") as f:
        json.dump(card, f)
    return export


def _card(tmp_path, text):
    path = tmp_path / "MODEL_CARD.md"
    path.write_text(text)
    return str(path)


def test_a_card_without_the_datas_licence_is_refused(licensed_export, tmp_path):
    card = _card(tmp_path, "# tiny\nTrained on a treebank.\n")
    result = run_cli(pack_model.define_flags, pack_model.main,
                     f"--export_dir={licensed_export}", "--name=tiny", "--version=1",
                     f"--card={card}",
                     f"--output_dir={tmp_path / 'models'}")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: --card={tmp_path / 'MODEL_CARD.md'} does not state the training data's "
        f"licence: {treebank.NLTK_SAMPLE_LICENCE!r}")
    assert not os.path.exists(tmp_path / "models" / "tiny")


def test_packs_with_its_card_and_the_same_trees_as_its_source(licensed_export, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv("TETRA_TF_HOME", str(tmp_path / "home"))
    gold = tmp_path / "gold.txt"
    gold.write_text("\n".join(tiny_model.TREES) + "\n")
    card = _card(tmp_path, f"# tiny\n\nData licence: {treebank.NLTK_SAMPLE_LICENCE}.\n")
    result = run_cli(pack_model.define_flags, pack_model.main,
                     f"--export_dir={licensed_export}", "--name=tiny", "--version=2",
                     f"--card={card}", f"--output_dir={tmp_path / 'models'}",
                     f"--gold={gold}")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"packed {licensed_export} as tiny version 2 in ")
    count = len(tiny_model.TREES)
    assert lines[1].startswith(f"{count} of {count} trees the same as the source export's; F1 ")
    record = packaged_models.verify("tiny", str(tmp_path / "models"))
    assert record["version"] == "2" and export_format.PACKAGED_CARD_FILE in record["files"]
    with open(tmp_path / "models" / "tiny" / export_format.PACKAGED_CARD_FILE) as f:
        assert treebank.NLTK_SAMPLE_LICENCE in f.read()
