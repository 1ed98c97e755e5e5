"""Tests for tetra_tf.trees.treebank: reading, cleaning and the NLTK sample splits."""

import random

import nltk
import pytest

from conftest import nltk_sample_available

from tetra_tf.trees import treebank




needs_sample = pytest.mark.skipif(not nltk_sample_available(),
                                  reason="NLTK treebank sample not found (set NLTK_DATA)")


@pytest.mark.parametrize("label, expected", [
    ("NP-SBJ-1", "NP"),
    ("PP-LOC=2", "PP"),
    ("NP-SBJ=3", "NP"),
    ("S-TPC-1", "S"),
    ("NP=2", "NP"),
    ("ADVP-TMP", "ADVP"),
    ("NP", "NP"),
    ("PRP$", "PRP$"),
    ("ADVP|PRT", "ADVP|PRT"),
    ("-LRB-", "-LRB-"),
    ("-RRB-", "-RRB-"),
    ("-NONE-", "-NONE-"),
    ("-LCB-", "-LCB-"),
    ("-RCB-", "-RCB-"),
])
def test_strip_function_tags(label, expected):
    assert treebank.strip_function_tags(label) == expected


def test_clean_tree_strips_tags_keeps_pos_and_brackets():
    raw = nltk.Tree.fromstring(
        "( (S-TPC-1 (NP-SBJ=3 (-LRB- -LRB-) (NNP Mr.) (-RRB- -RRB-)) "
        "(VP (VBZ is) (PP-LOC=2 (IN in) (NP (NN town)))) (. .)) )")
    expected = nltk.Tree.fromstring(
        "(TOP (S (NP (-LRB- -LRB-) (NNP Mr.) (-RRB- -RRB-)) "
        "(VP (VBZ is) (PP (IN in) (NP (NN town)))) (. .)))")
    assert treebank.clean_tree(raw) == expected


def test_clean_tree_removes_traces_and_emptied_constituents():
    raw = nltk.Tree.fromstring(
        "( (S (NP-SBJ-1 (-NONE- *)) (VP (VBD said) (SBAR (-NONE- 0) (S (NP-SBJ (-NONE- *T*-2)) "
        "(VP (-NONE- *?*))))) (NP (NP (-NONE- *U*)) (NN x)) (. .)) )")
    cleaned = treebank.clean_tree(raw)
    assert cleaned == nltk.Tree.fromstring(
        "(TOP (S (VP (VBD said)) (NP (NN x)) (. .)))")
    assert "-NONE-" not in treebank.tree_to_line(cleaned)
    for subtree in cleaned.subtrees():
        assert len(subtree) > 0


def test_clean_tree_only_empty_elements_leaves_no_words():
    raw = nltk.Tree.fromstring("( (S (NP-SBJ (-NONE- *)) (VP (-NONE- *T*))) )")
    cleaned = treebank.clean_tree(raw)
    assert cleaned.label() == "TOP" and cleaned.leaves() == []


@pytest.mark.parametrize("raw, expected", [
    ("( (S (NN a)) )", "(TOP (S (NN a)))"),
    ("(ROOT (S (NN a)))", "(TOP (S (NN a)))"),
    ("(TOP (S (NN a)))", "(TOP (S (NN a)))"),
    ("(S-1 (NN a))", "(TOP (S (NN a)))"),
    ("(NN a)", "(TOP (NN a))"),
    ("( (S (NN a)) (. .))", "(TOP (S (NN a)) (. .))"),
])
def test_clean_tree_roots_in_top(raw, expected):
    assert treebank.clean_tree(nltk.Tree.fromstring(raw)) == nltk.Tree.fromstring(expected)


def test_clean_tree_does_not_change_its_input():
    raw = nltk.Tree.fromstring("( (S (NP-SBJ (-NONE- *)) (VP (VBZ a))) )")
    before = raw.copy(deep=True)
    treebank.clean_tree(raw)
    assert raw == before


def test_clean_tree_rejects_word_without_pos():
    with pytest.raises(ValueError, match="part-of-speech"):
        treebank.clean_tree(nltk.Tree("TOP", [nltk.Tree("S", ["word", nltk.Tree("NN", ["x"])])]))


def test_tree_to_line_round_trips():
    tree = nltk.Tree.fromstring(
        "(TOP (S (NP (-LRB- -LRB-) (PRP She) (-RRB- -RRB-)) (VP (VBZ enjoys) "
        "(NP (NN tennis))) (. .)))")
    line = treebank.tree_to_line(tree)
    assert "\n" not in line
    assert line.startswith("(TOP (S (NP (-LRB- -LRB-)")
    assert nltk.Tree.fromstring(line) == tree


def test_reads_multiline_mrg_and_one_per_line(tmp_path):
    mrg = tmp_path / "a.mrg"
    mrg.write_text("( (S \n    (NP-SBJ (NNP Pierre) )\n    (VP (MD will) )\n    (. .) ))\n"
                   "( (S \n    (NP-SBJ (PRP He) )\n    (. .) ))\n")
    flat = tmp_path / "b.txt"
    flat.write_text("(TOP (S (NP (NNP Pierre)) (VP (MD will)) (. .)))\n\n"
                    "(TOP (S (NP (PRP He)) (. .)))\n")
    entries = list(treebank.read_treebank_files([str(mrg), str(flat)]))
    assert [(e.source, e.line, e.error) for e in entries] == [
        (str(mrg), 1, None), (str(mrg), 5, None), (str(flat), 1, None), (str(flat), 3, None)]
    assert treebank.clean_tree(entries[0].tree) == entries[2].tree
    assert treebank.clean_tree(entries[1].tree) == entries[3].tree


MALFORMED_TEXT = """\
( (S (NP-SBJ (NNP A)) (VP (VBZ b)) (. .)) )
( (S (NP (NN x))
    (VP (VBZ y))
(TOP (S (NN c)) ))
this is junk
  more junk
(TOP (S (-NONE- *T*)))
()
(TOP (S (NN a) b)) (TOP (NN z))
(TOP (S (NN a)) (X (
(NN ok))
(TOP (NN good))
( (S (NN x))
( (S (NN y)) ))
(TOP dog)
"""


def test_malformed_trees_are_reported_with_line_and_reading_goes_on(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text(MALFORMED_TEXT)
    entries = list(treebank.read_treebank_file(str(path)))
    got = [(e.line, e.error is None) for e in entries]
    assert got == [(1, True), (2, False), (4, False), (5, False), (7, True), (8, False),
                   (9, False), (9, True), (10, False), (11, False), (12, True), (13, False),
                   (15, False)]
    assert all(e.source == str(path) for e in entries)
    errors = {e.line: e.error for e in entries if e.error}
    assert "unclosed" in errors[2]
    assert "extra ')'" in errors[4]
    assert "outside brackets" in errors[5]
    assert errors[8] == "no words"
    assert "part-of-speech" in errors[9]
    assert "unclosed" in errors[10]
    assert "extra ')'" in errors[11]
    assert "empty label" in errors[13]
    assert "part-of-speech" in errors[15]
    good = [e for e in entries if e.error is None]
    assert all(isinstance(e.tree, nltk.Tree) for e in good)
    assert [e.tree.leaves() for e in good] == [["A", "b", "."], ["*T*"], ["z"], ["good"]]
    assert all(e.tree is None for e in entries if e.error)


def test_treebank_files(tmp_path):
    for name in ("b.mrg", "a.mrg", "c.txt", ".hidden"):
        (tmp_path / name).write_text("(TOP (NN a))\n")
    (tmp_path / "sub").mkdir()
    assert treebank.treebank_files(str(tmp_path)) == [
        str(tmp_path / n) for n in ("a.mrg", "b.mrg", "c.txt")]
    assert treebank.treebank_files(str(tmp_path / "*.mrg")) == [
        str(tmp_path / n) for n in ("a.mrg", "b.mrg")]
    assert treebank.treebank_files(str(tmp_path / "c.txt")) == [str(tmp_path / "c.txt")]
    with pytest.raises(FileNotFoundError, match="no treebank files"):
        treebank.treebank_files(str(tmp_path / "*.nothing"))


def test_unknown_split():
    with pytest.raises(ValueError, match="unknown split"):
        treebank.nltk_sample_file_names("validation")


def test_missing_sample_gives_one_line_hint(monkeypatch):
    def not_found(resource, *args, **kwargs):
        raise LookupError(resource)

    monkeypatch.setattr(nltk.data, "find", not_found)
    with pytest.raises(treebank.NltkSampleNotFoundError) as error:
        list(treebank.read_nltk_sample("dev"))
    message = str(error.value)
    assert "\n" not in message and "NLTK_DATA" in message and "nltk.downloader" in message


@needs_sample
def test_nltk_sample_split_sizes():
    sizes = {}
    for split in ("train", "dev", "test"):
        entries = list(treebank.read_nltk_sample(split))
        assert all(e.error is None for e in entries)
        sizes[split] = len(entries)
        files = [e.source.rsplit("/", 1)[-1] for e in entries]
        assert files == sorted(files)  # File order.
        first, last = treebank.NLTK_SAMPLE_SPLITS[split]
        assert files[0] == f"wsj_{first:04d}.mrg" and files[-1] == f"wsj_{last:04d}.mrg"
    assert sizes == {"train": 3396, "dev": 273, "test": 245}


@needs_sample
def test_nltk_sample_cleans_to_standard_trees():
    for entry in treebank.read_nltk_sample("dev"):
        tree = treebank.clean_tree(entry.tree)
        assert tree.label() == "TOP"
        line = treebank.tree_to_line(tree)
        assert "-NONE-" not in line
        assert nltk.Tree.fromstring(line) == tree
        for subtree in tree.subtrees():
            label = subtree.label()
            assert len(subtree) > 0
            if not label.startswith("-"):
                assert "-" not in label and "=" not in label, label


# --- Wide and deep trees: read, check, clean, write without recursion ---------------------


def _wide_text(n: int) -> str:
    return "( (S-1 " + " ".join(f"(NN w{i})" for i in range(n)) + " (-NONE- *)) )"


def _deep_text(n: int) -> str:
    return "( " + "(NP-SBJ " * n + "(NN w) (-NONE- *T*)" + ")" * n + " )"


def _deep_branching_text(n: int) -> str:
    return "( " + "".join(f"(X-{i} (NN w{i}) " for i in range(n)) + "(NN end)" + ")" * n + " )"


@pytest.mark.parametrize("text, words, depth", [
    (_wide_text(1000), 1000, 2), (_wide_text(10000), 10000, 2),
    (_deep_text(10000), 1, 10001), (_deep_branching_text(10000), 10001, 10001)])
def test_wide_and_deep_trees(text, words, depth):
    (entry,) = treebank.read_trees(text)
    assert entry.error is None
    cleaned = treebank.clean_tree(entry.tree)
    assert len(treebank.leaves(cleaned)) == words
    # Function tags and -NONE- are gone at every level; TOP replaced the empty root.
    labels = [node.label() for node in treebank.iter_subtrees(cleaned)]
    assert labels[0] == "TOP" and len(labels) == words + depth
    assert not any("-" in label for label in labels)
    line = treebank.tree_to_line(cleaned)
    assert line.count("(") == len(labels)
    assert treebank.trees_equal(treebank.parse_tree(line), cleaned)


def test_parse_tree_equals_nltk_and_reports_errors():
    text = "( (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat)) (. .)) )"
    assert treebank.parse_tree(text) == nltk.Tree.fromstring(text)
    for bad in ("(S (NN a)", "(S (NN a)))", "word (S (NN a))", "(S (NN a)) (S (NN b))", ""):
        with pytest.raises(ValueError, match="expected"):
            treebank.parse_tree(bad)


def test_parse_tree_fast_path_agrees_with_the_checked_reader():
    # parse_tree reads well-formed text in one pass and hands anything else to the
    # token-by-token reader: on any text, both give the same tree or the same error.
    rng = random.Random(3)
    texts = ["(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))", "( (S (NN a)))",
             "(A \\(b\\) c)", "(X (Y z) )", "(A (B", "(A) b", ") (A b)", "((A b)"]
    texts += ["".join(rng.choice(["(", ")", " ", "a", "NP", "\\(", "\n"])
                      for _ in range(rng.randrange(1, 14))) for _ in range(3000)]

    def outcome(read, text):
        try:
            return read(text)
        except ValueError as e:
            return str(e)

    for text in texts:
        assert outcome(treebank.parse_tree, text) == outcome(
            treebank._parse_tree_checked, text), text  # pylint: disable=protected-access


def test_trees_equal():
    a = nltk.Tree.fromstring("(S (NP (DT a)) (VP (VB b)))")
    assert treebank.trees_equal(a, a.copy(deep=True))
    assert not treebank.trees_equal(a, nltk.Tree.fromstring("(S (NP (DT a)) (VP (VB c)))"))
    assert not treebank.trees_equal(a, nltk.Tree.fromstring("(S (NP (DT a)) (XP (VB b)))"))
    assert not treebank.trees_equal(a, nltk.Tree.fromstring("(S (NP (DT a)))"))
    assert not treebank.trees_equal(nltk.Tree("S", ["x"]), nltk.Tree("S", [nltk.Tree("x", [])]))
