"""Training's evaluation and the exported SavedModel (tools/eval_export.py) agree on F1."""

import os

import pytest

from conftest import load_tool, parse_with_copies_of


@pytest.fixture(scope="module")
def trained_parser(trained_run):
    """The trained run's export, loaded once for the module."""
    from tetra_tf.parser import Parser

    return Parser(trained_run["export_dir"])


@pytest.fixture(autouse=True)
def _trained_export_loaded_once(trained_parser, monkeypatch):
    """eval_export's Parser of the trained run's export is a copy of `trained_parser`
    (other exports load as usual): the scores are what this module compares."""
    parse_with_copies_of(trained_parser, monkeypatch)


def test_export_scores_like_training(trained_run):
    """`train --evaluate` (the checkpoint) and eval_export (its export) on the same split."""
    in_training = trained_run["evaluation"]
    export_dir = trained_run["export_dir"]
    tool = load_tool("eval_export")
    _, trees = tool.read_gold(os.path.join(trained_run["test_dir"], "trees.txt"))
    assert len(trees) == in_training["sentences"] == 24
    assert in_training["f1"] > 0  # A few epochs of a tiny model get some brackets right.
    gold_pos, pos_accuracy, _ = tool.score_export(export_dir, trees, batch_size=5)
    predicted_pos, _, _ = tool.score_export(export_dir, trees, gold_pos=False)
    # The two routes pad batches differently, so float rounding may flip a near-tie of
    # this barely trained model (the trained MiniLM gives identical figures): allow one
    # sentence's worth of difference.
    one_sentence = 100.0 / 24
    assert gold_pos.fscore == pytest.approx(in_training["f1"], abs=one_sentence / 4)
    assert gold_pos.complete_match == pytest.approx(in_training["exact_match"],
                                                    abs=one_sentence + 1e-9)
    assert predicted_pos.fscore == pytest.approx(in_training["f1_predicted_pos"],
                                                 abs=one_sentence / 4)
    assert pos_accuracy == pytest.approx(in_training["pos_accuracy"], abs=0.5)


def test_bfloat16_export_keeps_f1(trained_run, tmp_path):
    """The trained model exported with a bfloat16 encoder parses every sentence of the
    split, within 0.1 F1 of its float32 export (gold POS, the WSJ standard; this barely
    trained tagger's predicted POS fail EVALB's length check in both)."""
    from tetra_tf.savedmodel import exporter as export

    bf16_dir = str(tmp_path / "bf16" / "1")
    export.export(trained_run["model_dir"], bf16_dir, encoder_dtype="bfloat16")
    tool = load_tool("eval_export")
    _, trees = tool.read_gold(os.path.join(trained_run["test_dir"], "trees.txt"))
    float32, _, _ = tool.score_export(trained_run["export_dir"], trees)
    bfloat16, _, _ = tool.score_export(bf16_dir, trees)
    assert float32.fscore > 0
    assert bfloat16.counts.sentences == len(trees) and bfloat16.counts.error_sentences == 0
    assert bfloat16.fscore == pytest.approx(float32.fscore, abs=0.1)
