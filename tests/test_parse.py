"""Tests for tetra_tf/parse.py: the command-line parser."""

import io
import os
import subprocess
import sys

import tetra_tf  # noqa: F401  (selects Keras 2 before TensorFlow loads)

import nltk
import pytest

from tetra_tf import evaluate, export, parse
from tetra_tf.parser import Parser, with_pos_tags

sys.path.insert(0, os.path.dirname(__file__))
import tiny_model  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINES = ["The cat sat on the mat .", "Hi", "-LRB- 1\\/2 -RRB-  ``quoted''", "a :-) b"]


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("tiny_model"))
    tiny_model.make_model_dir(model_dir)
    path = os.path.join(str(tmp_path_factory.mktemp("export")), "1")
    export.export(model_dir, path)
    return path


def _cli(*args, stdin=""):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "tetra_tf.parse", *args], input=stdin,
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.fixture(scope="module")
def parser(export_dir):
    return Parser(export_dir)


def _run(parser, text, **kwargs) -> list[str]:
    output = io.StringIO()
    parse.run(parser.export_dir, io.StringIO(text), output, parser=parser, **kwargs)
    return output.getvalue().split("\n")[:-1]


def test_one_tree_per_line_in_order(parser):
    lines = _run(parser, "\n".join(LINES) + "\n", batch_size=2)
    assert len(lines) == len(LINES)
    expected_words = [line.split() for line in LINES]
    expected_words[3][1] = ":--RRB-"  # brackets inside tokens are escaped
    for line, words in zip(lines, expected_words):
        tree = nltk.Tree.fromstring(line)
        assert tree.label() == "TOP" and tree.leaves() == words
    assert lines == parser.parse_to_strings(expected_words)


def test_last_line_without_newline_and_crlf(parser):
    assert len(_run(parser, "a b\r\nc d")) == 2


def test_tokenize_raw_text(parser):
    text = 'He said, "Hello (world)" -- it costs $5.50.\n'
    (line,) = _run(parser, text, tokenize=True)
    assert nltk.Tree.fromstring(line).leaves() == [
        "He", "said", ",", "``", "Hello", "-LRB-", "world", "-RRB-", "''", "--", "it",
        "costs", "$", "5.50", "."]


@pytest.mark.parametrize("text, line_number", [("a\n\nb\n", 2), ("a\n  \t\n", 2), ("\n", 1)])
def test_empty_line_is_an_input_error(parser, text, line_number):
    with pytest.raises(parse.InputError, match=f"line {line_number} is empty"):
        _run(parser, text)


def test_empty_input_gives_empty_output(parser):
    assert _run(parser, "") == []


def test_missing_model_dir(tmp_path):
    with pytest.raises(parse.InputError, match="no SavedModel"):
        parse.run(str(tmp_path), io.StringIO("a b\n"), io.StringIO())


def test_cli_file_to_file_and_stdin_to_stdout(export_dir, parser, tmp_path):
    input_path, output_path = tmp_path / "in.txt", tmp_path / "out.txt"
    input_path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    result = _cli(f"--model_dir={export_dir}", f"--input={input_path}",
                  f"--output={output_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    written = output_path.read_text(encoding="utf-8").split("\n")[:-1]
    assert written == _run(parser, "\n".join(LINES))
    assert "sent" in result.stderr  # the progress bar
    result = _cli(f"--model_dir={export_dir}", stdin="a\n\nb\n")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: line 2 is empty: give one sentence per line"]


def test_cli_usage_errors(tmp_path):
    result = _cli(f"--model_dir={tmp_path}", f"--input={tmp_path / 'missing.txt'}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in result.stderr
    result = _cli("--help")
    assert result.returncode == 0 and "Exit codes" in result.stdout
    result = _cli("--batch_size=x")
    assert result.returncode == 2 and result.stderr.startswith("error: flag --batch_size")


def test_eval_export_scores_with_gold_or_predicted_pos(export_dir, parser, tmp_path):
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import eval_export  # pylint: disable=import-outside-toplevel

    gold_path = tmp_path / "gold.txt"
    gold_path.write_text("\n".join(tiny_model.TREES) + "\n\n", encoding="utf-8")
    gold_lines, gold_trees = eval_export.read_gold(str(gold_path))
    assert len(gold_lines) == len(tiny_model.TREES)
    result, pos_accuracy, lines = eval_export.score_export(export_dir, gold_lines, gold_trees)
    assert result.tagging_accuracy == 100.0  # gold POS on the leaves
    # What is scored: the parser's trees with the gold POS on their leaves.
    expected = [evaluate.tree_to_line(with_pos_tags(tree, [pos for _, pos in gold.pos()]))
                for tree, gold in zip(parser.parse_sents([t.leaves() for t in gold_trees]),
                                      gold_trees)]
    assert lines == expected
    assert result.fscore == evaluate.evaluate_lines(gold_lines, expected).fscore
    predicted, same_accuracy, _ = eval_export.score_export(
        export_dir, gold_lines, gold_trees, gold_pos=False)
    assert same_accuracy == pos_accuracy
    # (EVALB drops words whose predicted tag is punctuation, so a random model's predicted
    # POS can make length-mismatch errors; gold POS never do.)
    assert predicted.counts.sentences == len(gold_lines) and result.counts.error_sentences == 0
    gold_path.write_text("(TOP (S (NN a)\n", encoding="utf-8")
    with pytest.raises(ValueError, match="gold.txt:1: not a tree"):
        eval_export.read_gold(str(gold_path))
