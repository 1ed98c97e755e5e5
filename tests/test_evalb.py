"""Tests for tetra_tf.evalb, the EVALB-equivalent scorer.

The oracle is the real EVALB output shipped with EVALB (sample.rsl for sample.gld vs
sample.tst under sample.prm) plus small cases whose figures are worked out by hand from
EVALB's rules (evalb.c), written next to each case.
"""

import dataclasses
import os
import random
import re
import subprocess
import sys

import nltk
import pytest

from tetra_tf.trees import evalb
from tetra_tf.trees.evalb import COLLINS, evaluate_lines, evaluate_trees, tree_to_line

EVALB_DIR = os.path.abspath(os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "evalb"))
REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _evalb_file(name):
    path = os.path.join(EVALB_DIR, name)
    if not os.path.exists(path):
        pytest.skip(f"EVALB oracle file {path} not found")
    return path


def _parse_rsl(text):
    """Splits an EVALB .rsl into (rows, totals line, {block title: {name: value}})."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.startswith("=====")]
    rows = lines[rules[0] + 1:rules[1]]
    totals = lines[rules[1] + 1]
    blocks, title = {}, None
    for line in lines[rules[1] + 2:]:
        if line.startswith("-- "):
            title = line.strip()
            blocks[title] = {}
        elif "=" in line and title:
            name, value = line.split("=")
            blocks[title][" ".join(name.split())] = float(value)
    return rows, totals, blocks


def _run_cli(*args, module="tetra_tf.evalb"):
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def sample_run():
    gold, test, prm, rsl = (_evalb_file(f"sample.{ext}") for ext in ("gld", "tst", "prm", "rsl"))
    params = evalb.load_params(prm)
    result = evalb.evaluate_files(gold, test, params)
    with open(rsl) as f:
        reference = _parse_rsl(f.read())
    return result, reference


# -- the real EVALB output --------------------------------------------------------------


def test_summary_blocks_equal_sample_rsl(sample_run):
    result, (_, _, ref_blocks) = sample_run
    _, _, ours = _parse_rsl(result.table() + result.summary())
    assert set(ref_blocks) == {"-- All --", "-- len<=40 --"}
    for title, ref_figures in ref_blocks.items():
        assert len(ref_figures) == 11
        for name, value in ref_figures.items():
            assert ours[title][name] == value, (title, name)
        # The FMeasure line is newer than sample.rsl: it is 2PR/(P+R) of the printed figures.
        r, p = ref_figures["Bracketing Recall"], ref_figures["Bracketing Precision"]
        assert abs(ours[title]["Bracketing FMeasure"] - 2 * p * r / (p + r)) < 0.006


def test_summary_wording_and_format(sample_run):
    result, _ = sample_run
    summary = result.summary()
    assert "Bracketing FMeasure       =  89.12\n" in summary
    with open(_evalb_file("sample.rsl")) as f:
        rsl_lines = set(f.read().splitlines())
    # Every line of our summary but the FMeasure ones appears verbatim in EVALB's output.
    for line in summary.splitlines():
        if line and "FMeasure" not in line:
            assert line in rsl_lines, line


def test_per_sentence_rows_equal_sample_rsl(sample_run):
    result, (ref_rows, ref_totals, ref_blocks) = sample_run
    table = result.table().splitlines()
    assert table[:3] == _rsl_table_head()
    assert table[3:3 + len(ref_rows)] == ref_rows
    # Totals line: this sample.rsl comes from a 1997 EVALB that printed the number of
    # no-crossing sentences (16) in the crossing column, with other column widths; the
    # later evalb.c prints the total number of crossing brackets there.
    ours = [float(x) for x in table[3 + len(ref_rows) + 1].split()]
    ref = [float(x) for x in ref_totals.split()]
    crossing_column = 5
    assert ours[:crossing_column] == ref[:crossing_column]
    assert ours[crossing_column + 1:] == ref[crossing_column + 1:]
    valid = ref_blocks["-- All --"]["Number of Valid sentence"]
    assert ref[crossing_column] == round(ref_blocks["-- All --"]["No crossing"] * valid / 100)
    row_crossings = sum(int(row.split()[8]) for row in ref_rows if row.split()[2] == "0")
    assert ours[crossing_column] == row_crossings


def _rsl_table_head():
    with open(_evalb_file("sample.rsl")) as f:
        return f.read().splitlines()[:3]


def test_gold_against_itself_is_perfect():
    gold = _evalb_file("sample.gld")
    for params in (evalb.load_params(_evalb_file("sample.prm")), COLLINS):
        result = evalb.evaluate_files(gold, gold, params)
        for counts in (result.counts, result.cutoff_counts):
            assert counts.error_sentences == counts.skip_sentences == 0
            assert counts.recall == counts.precision == counts.fscore == 100.0
            assert counts.complete_match == counts.tagging_accuracy == 100.0
            assert counts.average_crossing == 0.0
        assert "Bracketing FMeasure       = 100.00" in result.summary()


def test_parameter_files_load():
    assert evalb.load_params(_evalb_file("COLLINS.prm")) == COLLINS
    nk = evalb.load_params(_evalb_file("nk.prm"))
    assert nk.max_error == 10000 and nk.cutoff_len == 40 and nk.labeled and nk.debug == 0
    assert nk.delete_labels == ("TOP", "S1", "-NONE-", ",", ":", "``", "''", ".", "?", "!")
    assert nk.delete_labels_for_length == ("-NONE-",)
    assert nk.quote_labels == ("``", "''", "POS", "NN", "CD", "VBZ", ":")
    assert nk.eq_labels == (("ADVP", "PRT"),)
    sample = evalb.load_params(_evalb_file("sample.prm"))
    assert sample.eq_labels == (("T", "TT"),) and sample.eq_words == (("This", "this"),)
    assert sample.delete_labels == ("TOP", "-NONE-", ",", ":", "``", "''")


def test_parameter_file_warnings_like_evalb():
    with pytest.warns(evalb.EvalbParamsWarning) as record:
        params = evalb.parse_params("FOO 1\nLABELED 0\n# comment\nEQ_LABEL A\n")
    messages = [str(w.message) for w in record]
    assert messages == ["<params>:1: unknown keyword 'FOO'",
                        "<params>:4: EQ_LABEL requires two values"]
    assert not params.labeled and params.eq_labels == ()


# -- hand-checked cases -----------------------------------------------------------------


def _score(gold, pred, params=COLLINS):
    return evaluate_trees(gold if isinstance(gold, list) else [gold],
                          pred if isinstance(pred, list) else [pred], params)


def test_punctuation_deletion_changes_spans():
    gold = "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))"
    pred = "(S (NP (DT The) (NN dog)) (VP (VBD barked) (. .)))"
    # COLLINS deletes '.', so VP is (2,3) on both sides: S, NP, VP all match.
    result = _score(gold, pred)
    assert (result.counts.matched_brackets, result.counts.gold_brackets) == (3, 3)
    assert result.counts.words == 3  # the '.' is not a scored word either
    # Without deletion VP is (2,3) in gold and (2,4) in pred: 2 of 3 match.
    result = _score(gold, pred, dataclasses.replace(COLLINS, delete_labels=()))
    assert (result.counts.matched_brackets, result.counts.gold_brackets) == (2, 3)
    assert result.counts.words == 4


def test_root_bracket_counts_and_top_is_deleted():
    gold = "(S (NP (DT a) (NN b)) (VP (VBZ c)))"
    assert _score(gold, "(TOP " + gold + ")").recall == 100.0  # TOP deleted
    wrong_root = _score(gold, "(X (NP (DT a) (NN b)) (VP (VBZ c)))")
    assert wrong_root.counts.matched_brackets == 2  # S is scored like any bracket
    assert wrong_root.counts.gold_brackets == 3
    # nltk trees work the same as strings.
    tree = nltk.Tree.fromstring(gold)
    assert evaluate_trees([tree], [nltk.Tree("TOP", [tree])]).fscore == 100.0


def test_duplicate_brackets_are_a_multiset():
    # README of EVALB: n gold, m test copies of the same labeled span match min(n, m).
    result = _score("(S (NP (NP (NN a) (NN b))))", "(S (NP (NN a) (NN b)))")
    assert (result.counts.matched_brackets, result.counts.gold_brackets,
            result.counts.test_brackets) == (2, 3, 2)
    assert result.precision == 100.0
    assert result.recall == pytest.approx(200 / 3)


def test_function_tags_eq_labels_and_unlabeled():
    gold = "(S (NP-SBJ (PRP I)) (VP (VBD gave) (PRT (RP up))))"
    pred = "(S (NP (PRP I)) (VP (VBD gave) (ADVP (RP up))))"
    assert _score(gold, pred).fscore == 100.0  # -SBJ cut off; ADVP = PRT in COLLINS
    assert _score(gold, pred, dataclasses.replace(COLLINS, eq_labels=())).recall == 75.0
    unlabeled = dataclasses.replace(COLLINS, labeled=False)
    assert _score(gold, "(S (X (PRP I)) (Y (VBD gave) (Z (RP up))))", unlabeled).recall == 100.0


def test_crossing_and_tagging():
    # Gold A covers words 0-1; pred B covers 1-2 and crosses it. Tags: 2 of 3 right.
    result = _score("(S (A (X a) (X b)) (X c))", "(S (X a) (B (X b) (Y c)))")
    sentence = result.sentences[0]
    assert (sentence.crossing, sentence.matched_brackets, sentence.correct_tags) == (1, 1, 2)
    assert result.counts.no_crossing_sentences == 0
    assert result.counts.two_or_less_crossing_sentences == 1
    assert result.tagging_accuracy == pytest.approx(200 / 3)


def test_length_for_cutoff_ignores_traces_but_not_punctuation():
    words = " ".join(f"(NN w{i})" for i in range(39))
    traced = f"(S {words} (-NONE- *) (-NONE- *T*-1))"  # 41 preterminals, length 39
    result = _score(traced, f"(S {words})")
    assert result.sentences[0].length == 39
    assert result.cutoff_counts.sentences == 1 and result.fscore == 100.0
    punctuated = f"(S {words} (: ;) (, ,))"  # length 41: only -NONE- is left out
    result = _score(punctuated, punctuated)
    assert result.sentences[0].length == 41
    assert result.cutoff_counts.sentences == 0 and result.counts.valid_sentences == 1


def test_quote_reinsertion_with_nk_params():
    nk = evalb.load_params(_evalb_file("nk.prm"))
    gold = "(S (NP (NNS dogs) ('' ')) (VP (VBP bark)))"
    pred = "(S (NP (NNS dogs) (POS ')) (VP (VBP bark)))"
    # COLLINS: the gold '' is deleted, the pred POS is not: 2 vs 3 words, an error.
    assert _score(gold, pred).counts.error_sentences == 1
    # nk.prm's QUOTE_LABELs put the quote back into gold: S(0,3) NP(0,2) VP(2,3) on both
    # sides, and 2 of 3 tags ('' vs POS differs).
    result = _score(gold, pred, nk)
    sentence = result.sentences[0]
    assert sentence.status == 0
    assert (sentence.matched_brackets, sentence.gold_brackets, sentence.words,
            sentence.correct_tags) == (3, 3, 3, 2)


def test_error_and_skip_accounting():
    gold = "(S (A (P this)) (B (Q is) (A (R a) (T test))))"
    preds = [
        gold,
        "",  # blank: skip
        "(S (A (P this)) (B (Q is) (A (R a) (T test)))",  # unbalanced: error
        "(S (A (P this)) (B (Q was) (A (R a) (T test))))",  # word mismatch: error
        "(S (A (P this)) (B (Q is) (U not) (A (R a) (T test))))",  # length: error
        "(S (A (P this) is) (B (R a) (T test)))",  # more than two elements: error
        "(S (A (P this)) (B (Q is) (A (R a) (T test)))))",  # extra ')': error
    ]
    result = evaluate_lines([gold] * len(preds), preds, COLLINS)
    assert [s.status for s in result.sentences] == [0, 2, 1, 1, 1, 1, 1]
    counts = result.counts
    assert (counts.sentences, counts.error_sentences, counts.skip_sentences,
            counts.valid_sentences) == (7, 5, 1, 1)
    assert counts.recall == 100.0 and counts.words == 4
    assert len(result.messages) == 6
    for line, message in zip((2, 3, 4, 5, 6, 7), result.messages):
        assert message.startswith(f"line {line}: ") and "\n" not in message
    assert "'is'" in result.messages[2] and "'was'" in result.messages[2]


def test_max_error_stops_like_evalb():
    gold = "(S (X a) (X b))"
    wrong = "(S (X a) (X c))"
    # EVALB exits when Error_count++ > MAX_ERROR, i.e. at the (MAX_ERROR + 2)-th error.
    params = dataclasses.replace(COLLINS, max_error=3)
    result = evaluate_lines([gold] * 4, [wrong] * 4, params)
    assert result.counts.error_sentences == 4
    with pytest.raises(evalb.TooManyErrors) as caught:
        evaluate_lines([gold] * 6, [wrong] * 6, params)
    assert caught.value.result.counts.sentences == 4  # the 5th error stops before recording


def test_line_count_mismatch_like_evalb():
    tree = "(S (X a) (X b))"
    result = evaluate_lines([tree] * 3, [tree], COLLINS)  # gold longer: stop at PRED's end
    assert result.line_count_mismatch and result.counts.sentences == 1
    assert result.messages[-1].startswith("line 2: ")
    result = evaluate_lines([tree], [tree] * 2, COLLINS)  # pred longer: extra ignored
    assert result.line_count_mismatch and result.counts.sentences == 1
    with pytest.raises(ValueError):
        evaluate_trees([tree], [])


def test_none_prediction_is_skipped():
    result = evaluate_trees(["(S (X a) (X b))"], [None])
    assert result.counts.skip_sentences == 1 and result.fscore == 0.0


# -- speed --------------------------------------------------------------------------------


def _random_tree(rng, words, labels=("NP", "VP", "PP", "S", "SBAR", "ADJP")):
    if len(words) == 1:
        return nltk.Tree(rng.choice(("NN", "DT", "VB", "IN")), [words[0]])
    cut = rng.randint(1, len(words) - 1)
    children = [_random_tree(rng, words[:cut], labels), _random_tree(rng, words[cut:], labels)]
    return nltk.Tree(rng.choice(labels), children)


def test_scoring_2500_random_trees():
    # Its speed is measured by bench/evalb.py.
    rng = random.Random(0)
    gold, pred = [], []
    for _ in range(2500):
        words = [f"w{i}" for i in range(rng.randint(5, 45))]
        gold.append(nltk.Tree("TOP", [_random_tree(rng, words)]))
        pred.append(nltk.Tree("TOP", [_random_tree(rng, words)]))
    result = evaluate_trees(gold, pred)
    assert result.counts.valid_sentences == 2500
    assert 0 < result.fscore < 100 and result.counts.crossing > 0


# -- command line -------------------------------------------------------------------------


def test_cli_reproduces_sample_rsl():
    gold, test, prm, rsl = (_evalb_file(f"sample.{ext}") for ext in ("gld", "tst", "prm", "rsl"))
    run = _run_cli(gold, test, f"--params={prm}", "--per_sentence")
    assert run.returncode == 0, run.stderr
    with open(rsl) as f:
        ref_rows, _, ref_blocks = _parse_rsl(f.read())
    rows, _, blocks = _parse_rsl(run.stdout)
    assert rows == ref_rows
    for title, figures in ref_blocks.items():
        assert {k: blocks[title][k] for k in figures} == figures
    # Errors/skips of sample.tst, one line each, naming the line.
    stderr_lines = run.stderr.splitlines()
    assert [int(re.match(r"line (\d+): ", l).group(1)) for l in stderr_lines] == [
        11, 12, 13, 14, 16, 17, 20]
    assert "Traceback" not in run.stderr


def test_cli_default_is_summary_only():
    gold = _evalb_file("sample.gld")
    run = _run_cli(gold, gold)
    assert run.returncode == 0 and run.stderr == ""
    assert run.stdout.startswith("=== Summary ===")
    assert "Bracketing FMeasure       = 100.00" in run.stdout


def test_cli_bad_input(tmp_path):
    gold = tmp_path / "gold.txt"
    pred = tmp_path / "pred.txt"
    tree = "(S (NP (DT the) (NN dog)) (VP (VBZ barks)))"
    gold.write_text("\n".join([tree] * 4) + "\n")
    pred.write_text(tree + "\n(S (NP (DT the) (NN dog)\n\n")  # malformed, blank; short
    run = _run_cli(str(gold), str(pred))
    assert run.returncode == evalb.EXIT_LINE_COUNT_MISMATCH
    assert "Traceback" not in run.stderr
    messages = run.stderr.splitlines()
    assert [m.split(":")[0] for m in messages] == ["line 2", "line 3", "line 4"]
    assert "unbalanced" in messages[0] and "blank" in messages[1]
    assert "Number of sentence        =      3" in run.stdout
    assert "Number of Error sentence  =      1" in run.stdout
    assert "Number of Skip  sentence  =      1" in run.stdout

    missing = _run_cli(str(gold), str(tmp_path / "nope.txt"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert len(missing.stderr.splitlines()) == 1 and "nope.txt" in missing.stderr

    usage = _run_cli(str(gold))
    assert usage.returncode == 2 and len(usage.stderr.splitlines()) == 1


def test_cli_help_documents_exit_codes():
    run = _run_cli("--help")
    assert run.returncode == 0
    assert "Exit codes" in run.stdout
    for code in ("0", "2", "3", "4"):
        assert re.search(rf"^\s+{code}\s+\w", run.stdout, re.M), code


# -- wide and deep trees --------------------------------------------------------------------


def _brute_force_crossing(gold_spans, test_spans):
    return sum(1 for s, e in test_spans if e - s >= 2 and any(
        a < s < b < e or s < a < e < b for a, b in gold_spans))


def test_crossing_count_of_large_sentences_equals_evalbs_pairwise_count():
    from tetra_tf.trees.evalb import _count_crossing

    rng = random.Random(3)
    for _ in range(20):
        n = rng.randint(60, 200)
        pairs = (sorted((rng.randint(0, n), rng.randint(0, n))) for _ in range(200))
        spans = [(a, b) for a, b in pairs if b > a]
        gold, test = spans[: len(spans) // 2], spans[len(spans) // 2:]
        assert len(gold) * len(test) > 4096  # past the small-sentence loop
        assert _count_crossing(gold, test, n) == _brute_force_crossing(gold, test)


@pytest.mark.parametrize("shape", ["unary", "right", "wide"])
def test_deep_and_wide_trees_score(shape):
    """100,000-deep chains and 100,000-word sentences score (iteratively, no quadratic step)."""
    n = 100_000
    if shape == "unary":
        gold = "(TOP " + "(X " * n + "(NN w)" + ")" * n + ")"
        test = "(TOP " + "(X " * (n - 1) + "(Y " + "(NN w)" + ")" * n + ")"
        matched = n - 1
    elif shape == "right":
        gold = "(TOP " + "".join(f"(X (NN w{i}) " for i in range(n)) + "(NN e)" + ")" * n + ")"
        test = gold.replace("(X (NN w7) ", "(Y (NN w7) ")
        matched = n - 1
    else:
        gold = "(TOP (S " + " ".join(f"(NN w{i})" for i in range(n)) + "))"
        test = "(TOP (S " + " ".join(f"(NP (NN w{i}))" for i in range(n)) + "))"
        matched = 1
    result = evaluate_lines([gold], [test])
    assert result.counts.valid_sentences == 1
    assert result.counts.matched_brackets == matched
    assert result.counts.crossing == 0
    tree = nltk.Tree("TOP", [nltk.Tree("NN", ["w"])])
    for _ in range(n):
        tree = nltk.Tree("X", [tree])
    assert tree_to_line(tree) == "(X " * n + "(TOP (NN w))" + ")" * n
