"""Tests for tetra_tf/convert.py (tools/convert_ptb.py): treebank files → TFRecords,
vocabularies, trees, stats."""

import io
import json
import os
import subprocess
import sys

import nltk
import pytest
import tensorflow as tf

from conftest import nltk_sample_available

from tetra_tf.data import convert as convert_ptb
from tetra_tf.data import records
from tetra_tf.trees import tags, treebank

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO_ROOT, "tools", "convert_ptb.py")


MRG = """\
( (S 
    (NP-SBJ-1 (NNP Pierre) (NNP Vinken) )
    (VP (MD will) 
      (VP (VB join) 
        (NP (DT the) (NN board) )
        (S (NP-SBJ (-NONE- *-1) ) (VP (TO to) (VP (VB stay) )))))
    (. .) ))
( (S 
    (NP-SBJ (PRP He) )
    (VP (VBD left) 
      (ADVP-TMP (RB early) ))
    (. .) ))
( (S (NP-SBJ (-NONE- *) ) (VP (-NONE- *T*-2) )) )
"""

ONE_PER_LINE = """\
(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))
(TOP (S (NP (DT The) (NN dog)) (VP (VBD ran)) (. .))
(TOP (S (NP (DT A) (NN bird)) (VP (VBD sang)) (. .)))
garbage here
(TOP (S (A+B (NN x)) (VP (VBD y))))
(TOP (S (NP (NNS Birds)) (VP (VBP sing) (ADVP (RB loudly))) (. .)))
"""

NEW_TAGS = """\
(TOP (S (NP (DT The) (NN cat)) (VP (VBD sat)) (. .)))
(TOP (FRAG (NP (FW déjà) (FW vu)) (. !)))
"""


@pytest.fixture
def fixture_dir(tmp_path):
    directory = tmp_path / "input"
    directory.mkdir()
    (directory / "a.mrg").write_text(MRG)
    (directory / "b.txt").write_text(ONE_PER_LINE)
    return directory


def test_a_tree_that_does_not_convert_back_is_reported_and_skipped(tmp_path, monkeypatch):
    def lossy_tags_to_tree(*args, **kwargs):
        tree = original(*args, **kwargs)
        tree.set_label("ROOT")
        return tree

    original = tags.tags_to_tree
    monkeypatch.setattr(tags, "tags_to_tree", lossy_tags_to_tree)
    source = tmp_path / "one.txt"
    source.write_text("(TOP (S (NP (DT A) (NN bird)) (VP (VBD sang))))\n")
    report = io.StringIO()
    with pytest.raises(RuntimeError, match="no tree was written"):
        convert_ptb.run(input_path=str(source), output_dir=str(tmp_path / "out"),
                        report=report, progress=False)
    assert report.getvalue().startswith(f"{source}:1: ")
    assert "roundtrip" in report.getvalue() or "convert back" in report.getvalue()


def _read_records(directory):
    dataset = tf.data.TFRecordDataset(records.record_files(str(directory))).map(
        records.parse_example)
    return [{k: v.numpy() for k, v in features.items()} for features in dataset]


def test_converts_fixture_and_counts_everything(fixture_dir, tmp_path):
    out = tmp_path / "out"
    report = io.StringIO()
    stats = convert_ptb.run(input_path=str(fixture_dir), output_dir=str(out),
                            stats_path=str(tmp_path / "stats.json"), num_shards=2,
                            report=report, progress=False)

    # 3 trees in a.mrg (the last only traces), 6 entries in b.txt.
    assert stats["trees_read"] == 9
    assert stats["trees_written"] == 6  # (A+B ...) too: a '+' in a label is escaped in tags
    skipped = stats["trees_skipped"]
    assert skipped["count"] == 3
    assert skipped["reasons"] == {"malformed": 2, "no words after cleaning": 1,
                                  "roundtrip failure": 0}
    assert stats["roundtrip_failures"] == 0
    assert stats["trees_read"] == stats["trees_written"] + skipped["count"]
    where = {(os.path.basename(e["source"]), e["line"], e["reason"])
             for e in skipped["examples"]}
    assert where == {("a.mrg", 13, "no words after cleaning"), ("b.txt", 2, "malformed"),
                     ("b.txt", 4, "malformed")}
    lines = report.getvalue().splitlines()
    assert len(lines) == 3
    assert any(line.startswith(f"{fixture_dir / 'b.txt'}:2: ") and "unclosed" in line
               for line in lines)

    # JSON stats on disk hold the same, with the required keys.
    on_disk = json.loads((tmp_path / "stats.json").read_text())
    for key in ("trees_read", "trees_written", "trees_skipped", "roundtrip_failures",
                "max_depth_histogram", "coverage_by_depth_cap", "words", "sentence_length",
                "longest_sentence", "vocab"):
        assert key in on_disk
    assert on_disk["trees_read"] == 9
    histogram = {int(d): c for d, c in on_disk["max_depth_histogram"].items()}
    assert sum(histogram.values()) == 6
    coverage = {int(c): share for c, share in on_disk["coverage_by_depth_cap"].items()}
    assert sorted(coverage) == list(range(1, 13))
    for cap, share in coverage.items():
        assert share == pytest.approx(sum(c for d, c in histogram.items() if d <= cap) / 6)
    assert coverage[12] == 1.0

    # trees.txt: the cleaned trees, in input order, the same as in the records.
    tree_lines = (out / "trees.txt").read_text().splitlines()
    assert tree_lines[0] == ("(TOP (S (NP (NNP Pierre) (NNP Vinken)) (VP (MD will) "
                             "(VP (VB join) (NP (DT the) (NN board)) (S (VP (TO to) "
                             "(VP (VB stay)))))) (. .)))")
    assert [nltk.Tree.fromstring(s).leaves()[:2] for s in tree_lines] == [
        ["Pierre", "Vinken"], ["He", "left"], ["The", "cat"], ["A", "bird"], ["x", "y"],
        ["Birds", "sing"]]
    assert sorted(os.listdir(out)) == sorted([
        "records-00000-of-00002.tfrecord", "records-00001-of-00002.tfrecord", "trees.txt",
        tags.LEAF_VOCAB_FILE, tags.INTERNAL_VOCAB_FILE, tags.POS_VOCAB_FILE])

    # The records parse back to the tags of the trees, with the saved vocabularies.
    vocabs = tags.TagVocabularies.load(str(out))
    parsed = _read_records(out)
    assert [f["tree"].decode("utf-8") for f in parsed] == tree_lines
    for features, line in zip(parsed, tree_lines):
        t = tags.tree_to_tags(nltk.Tree.fromstring(line))
        assert [w.decode("utf-8") for w in features["words"]] == list(t.words)
        assert [vocabs.pos.tag(i) for i in features["pos_tag_ids"]] == list(t.pos_tags)
        assert [vocabs.leaf.tag(i) for i in features["leaf_tag_ids"]] == list(t.leaf_tags)
        assert [vocabs.internal.tag(i) for i in features["internal_tag_ids"]] == list(
            t.internal_tags)
    assert vocabs == tags.TagVocabularies.build(
        tags.tree_to_tags(nltk.Tree.fromstring(s)) for s in tree_lines)
    assert stats["vocab"]["pos"] == len(vocabs.pos)
    assert stats["longest_sentence"]["words"] == max(
        len(nltk.Tree.fromstring(s).leaves()) for s in tree_lines)
    assert stats["words"] == sum(len(nltk.Tree.fromstring(s).leaves()) for s in tree_lines)


def test_vocab_from_reuse_and_unknown_tags(fixture_dir, tmp_path):
    train = tmp_path / "train"
    convert_ptb.run(input_path=str(fixture_dir / "*.txt"), output_dir=str(train),
                    report=io.StringIO(), progress=False)
    (tmp_path / "dev.txt").write_text(NEW_TAGS)
    dev = tmp_path / "dev"
    stats = convert_ptb.run(input_path=str(tmp_path / "dev.txt"), output_dir=str(dev),
                            vocab_from=str(train), num_shards=3, report=io.StringIO(), progress=False)
    for name in convert_ptb.VOCAB_FILES:
        assert (dev / name).read_text() == (train / name).read_text()
    unknown = stats["unknown_tags"]
    # FW and FRAG never occur in b.txt; the leaf tags of the FRAG sentence are all bare.
    assert unknown == {"pos": {"occurrences": 2, "tags": {"FW": 2}},
                       "leaf": {"occurrences": 0, "tags": {}},
                       "internal": {"occurrences": 1, "tags": {"L/FRAG": 1}}}
    vocabs = tags.TagVocabularies.load(str(train))
    parsed = _read_records(dev)
    assert len(parsed) == 2 and len(records.record_files(str(dev))) == 3
    fw = parsed[1]
    assert fw["pos_tag_ids"].tolist() == [-1, -1, vocabs.pos.id(".")]
    assert fw["internal_tag_ids"].tolist() == [vocabs.internal.id("L/NP"), -1]
    first = tags.tree_to_tags(nltk.Tree.fromstring(NEW_TAGS.splitlines()[0]))
    assert parsed[0]["leaf_tag_ids"].tolist() == vocabs.leaf.ids(first.leaf_tags)

    # Converting again with fewer shards replaces the old ones.
    convert_ptb.run(input_path=str(tmp_path / "dev.txt"), output_dir=str(dev),
                    vocab_from=str(train), num_shards=1, report=io.StringIO(), progress=False)
    assert [os.path.basename(p) for p in records.record_files(str(dev))] == [
        "records-00000-of-00001.tfrecord"]


def test_only_malformed_input_fails(tmp_path):
    (tmp_path / "bad.txt").write_text("junk\n(TOP (S (NP (NN a))\n")
    with pytest.raises(RuntimeError, match="no tree was written"):
        convert_ptb.run(input_path=str(tmp_path / "bad.txt"), output_dir=str(tmp_path / "o"),
                        stats_path=str(tmp_path / "s.json"), report=io.StringIO(), progress=False)
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["trees_read"] == 2 and stats["trees_skipped"]["count"] == 2


def _run_script(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("args, message", [
    ([], "no input"),
    (["--input=x.mrg", "--nltk_sample=dev"], "not both"),
    (["--input={tmp}/nothing-*.mrg"], "no treebank files match"),
    (["--input={tmp}/in.txt", "--output_dir={tmp}/in.txt/sub"], "not writable"),
    (["--input={tmp}/in.txt", "--vocab_from={tmp}/novocab"], "vocab"),
    (["--input={tmp}/in.txt", "--num_shards=0"], "num_shards"),
    (["--nltk_sample=validation"], "nltk_sample"),
    (["--no_such_flag=1"], "no_such_flag"),
    (["--input={tmp}/in.txt", "stray"], "unexpected arguments"),
])
def test_bad_usage_exits_2_with_one_line(tmp_path, capsys, args, message):
    (tmp_path / "in.txt").write_text("(TOP (NN a))\n")
    args = [a.format(tmp=tmp_path) for a in args]
    if not any(a.startswith("--output_dir") for a in args):
        args.append(f"--output_dir={tmp_path}/out")
    assert convert_ptb.cli(["convert_ptb.py", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("convert_ptb.py: error:") and message in lines[0]
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_script_exit_code_for_bad_usage(tmp_path):
    result = _run_script(f"--input={tmp_path}/*.mrg", f"--output_dir={tmp_path}/out")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"convert_ptb.py: error: no treebank files match '{tmp_path}/*.mrg'")


def test_cli_runs_and_prints_one_line_summary(fixture_dir, tmp_path, capsys):
    code = convert_ptb.cli(["convert_ptb.py", f"--input={fixture_dir}/a.mrg",
                            f"--output_dir={tmp_path}/out", f"--stats={tmp_path}/s.json"])
    assert code == 0
    captured = capsys.readouterr()
    summary = captured.out.strip().splitlines()
    assert len(summary) == 1 and "read 3 trees, wrote 2" in summary[0]
    assert f"{fixture_dir / 'a.mrg'}:13: skipped (no words after cleaning)" in captured.err
    assert json.loads((tmp_path / "s.json").read_text())["trees_written"] == 2


def test_help_documents_every_flag():
    result = _run_script("--help")
    assert result.returncode == 0
    for flag in ("--input", "--nltk_sample", "--output_dir", "--stats", "--vocab_from",
                 "--num_shards", "Exit codes"):
        assert flag in result.stdout




@pytest.mark.skipif(not nltk_sample_available(), reason="NLTK treebank sample not found")
def test_real_dev_split_as_a_script(tmp_path):
    out = tmp_path / "dev"
    result = _run_script("--nltk_sample=dev", f"--output_dir={out}",
                         f"--stats={tmp_path / 'dev.json'}")
    assert result.returncode == 0, result.stderr
    summary = result.stdout.strip().splitlines()
    assert len(summary) == 1 and "wrote 273" in summary[0]
    stats = json.loads((tmp_path / "dev.json").read_text())
    assert stats["trees_read"] == stats["trees_written"] == 273
    assert stats["licence"] == treebank.NLTK_SAMPLE_LICENCE  # the card of a model trained on it
    assert stats["trees_skipped"]["count"] == 0
    assert len((out / "trees.txt").read_text().splitlines()) == 273
    assert sum(1 for _ in tf.data.TFRecordDataset(records.record_files(str(out)))) == 273


def test_wide_and_deep_trees_convert(tmp_path):
    """One node with 1,000 children and a 10,000-deep tree convert like any other tree."""
    wide = "( (S " + " ".join(f"(NN w{i})" for i in range(1000)) + ") )"
    deep = "( " + "(NP " * 10000 + "(NN deep)" + ")" * 10000 + " )"
    branching = ("( " + "".join(f"(X (NN b{i}) " for i in range(10000)) + "(NN end)"
                 + ")" * 10000 + " )")
    source = tmp_path / "big.txt"
    source.write_text("\n".join([wide, deep, branching, "(TOP (S (NN a) (NN b)))"]) + "\n")
    out = tmp_path / "out"
    report = io.StringIO()
    stats = convert_ptb.run(input_path=str(source), output_dir=str(out), report=report,
                            progress=False)
    assert report.getvalue() == ""
    assert stats["trees_written"] == 4 and stats["trees_skipped"]["count"] == 0
    assert stats["words"] == 1000 + 1 + 10001 + 2
    lines = (out / "trees.txt").read_text().splitlines()
    assert lines[1] == "(TOP " + "(NP " * 10000 + "(NN deep)" + ")" * 10001
    assert [len(treebank.leaves(treebank.parse_tree(line))) for line in lines] == [
        1000, 1, 10001, 2]
    assert [len(r["words"]) for r in _read_records(out)] == [1000, 1, 10001, 2]
