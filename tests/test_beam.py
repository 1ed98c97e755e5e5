"""Tests for tetra_tf/beam.py and tetra_tf/beam_parse.py: the Apache Beam parsing pipeline.

One pipeline run (module-scoped) over several files, a .gz, bad lines and a model that
fails on one sentence serves most assertions; Beam's start-up is slow. Runs locally with
FnApiRunner.
"""

import bz2
import glob
import gzip
import json
import lzma
import os
import subprocess
import sys
import tracemalloc

import pytest

pytest.importorskip("apache_beam")

import tetra_tf  # noqa: F401,E402  (selects Keras 2 before TensorFlow loads)

import nltk  # noqa: E402
from apache_beam.io import fileio  # noqa: E402
from apache_beam.io.filesystem import FileMetadata  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from tetra_tf import beam, beam_parse, parse  # noqa: E402
from tetra_tf.parse import escape_brackets  # noqa: E402
from tetra_tf.parser import Parser  # noqa: E402
from conftest import subprocess_env  # noqa: E402

MAX_WORDS = 12
MAX_LINE_BYTES = 100
LONG_LINE = b"long " * 20_000  # over MAX_LINE_BYTES
TRIGGER = "KABOOM"  # the failing handler's model raises on any batch holding this word
# (file name, raw bytes, {line number: expected reason} for the lines to reject).
GOOD_LINES = ["The cat sat on the mat .", "Hi", "-LRB- 1\\/2 -RRB-  ``quoted''", "a :-) b",
              "She says he even left early .", "Büro 東京 naïve", "3 dogs , 2 cats and a bird"]
INPUTS = {
    "good.txt": ("\n".join(GOOD_LINES) + "\n").encode(),
    "mixed.txt": "\ufeffThe cat sat .\r\n\r\n  \t \nword " .encode()
                 + b"\xff\xfe bytes\n" + " ".join(["w"] * (MAX_WORDS + 1)).encode()
                 + f"\nthe {TRIGGER} word\nshe left\n".encode() + LONG_LINE
                 + b"\nno final newline",
    "sub/zipped.txt.gz": gzip.compress(b"Running is fun !\n" + LONG_LINE
                                       + b"\n\nMr. Smith ?\n"),
}
EXPECTED_REJECTED = {
    ("mixed.txt", 2): beam.EMPTY, ("mixed.txt", 3): beam.EMPTY,
    ("mixed.txt", 4): beam.NOT_UTF8, ("mixed.txt", 5): beam.TOO_MANY_WORDS,
    ("mixed.txt", 6): beam.MODEL_ERROR, ("mixed.txt", 8): beam.TOO_LONG,
    ("sub/zipped.txt.gz", 2): beam.TOO_LONG, ("sub/zipped.txt.gz", 3): beam.EMPTY,
}


def _input_lines(corpus: str) -> dict[tuple[str, int], bytes]:
    """(file name, line number) → raw line, read independently of the pipeline."""
    lines = {}
    for name, data in INPUTS.items():
        data = gzip.decompress(data) if name.endswith(".gz") else data
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if number == len(data.split(b"\n")) and raw == b"":
                break
            lines[(name, number)] = raw.rstrip(b"\r")
    return lines


class FailingParser(Parser):
    """A Parser whose model calls raise on any batch holding TRIGGER."""

    def parse_to_scored_strings(self, sentences, batch_size=64, progress=None):
        if any(TRIGGER in words for words in sentences):
            raise RuntimeError(f"{TRIGGER} in the batch")
        return super().parse_to_scored_strings(sentences, batch_size, progress)


class FailingHandler(beam.ParseModelHandler):
    """A handler whose model raises on any batch holding TRIGGER."""

    def load_model(self):
        return FailingParser(self._model_dir)


@pytest.fixture(scope="module")
def export_dir(tiny_export_dir):
    return tiny_export_dir  # conftest's shared tiny export


@pytest.fixture(scope="module")
def parser(export_dir):
    return Parser(export_dir)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for name, data in INPUTS.items():
        os.makedirs(os.path.dirname(root / name), exist_ok=True)
        (root / name).write_bytes(data)
    return str(root)


@pytest.fixture(scope="module")
def pipeline_run(export_dir, corpus, tmp_path_factory):
    """One run over all inputs with the failing handler: (counters, records, dead letters, out)."""
    output = os.path.join(str(tmp_path_factory.mktemp("out")), "trees")
    options = beam.ParseOptions(
        model_dir=export_dir, inputs=[os.path.join(corpus, "*.txt"),
                                      os.path.join(corpus, "sub", "*.gz")],
        output=output, max_words=MAX_WORDS, max_line_bytes=MAX_LINE_BYTES, batch_size=4,
        ordered=True)
    totals = beam.run(options, PipelineOptions(runner="FnApiRunner"),
                      handler=FailingHandler(export_dir, batch_size=4))
    records = _read_jsonl(f"{output}-[0-9]*.jsonl")
    errors = _read_jsonl(f"{output}-errors-*.jsonl")
    return totals, records, errors, output


def _read_jsonl(pattern):
    paths = glob.glob(pattern)
    assert paths, pattern
    records = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            records.extend(json.loads(line) for line in f)
    return records


def _key(corpus, record):
    return os.path.relpath(record["file"], corpus), record["line"]


def test_every_line_in_exactly_one_output(pipeline_run, corpus):
    _, records, errors, _ = pipeline_run
    keys = [_key(corpus, r) for r in records + errors]
    assert len(keys) == len(set(keys))
    assert set(keys) == set(_input_lines(corpus))


def test_dead_letters_hold_exactly_the_bad_lines_with_reasons(pipeline_run, corpus):
    _, _, errors, _ = pipeline_run
    assert {_key(corpus, e): e["reason"] for e in errors} == EXPECTED_REJECTED
    by_key = {_key(corpus, e): e["error"] for e in errors}
    assert by_key[("mixed.txt", 2)] == "empty (give one sentence per line)"
    assert by_key[("mixed.txt", 4)] == "not UTF-8 (byte 0xFF at byte 6 of the line)"
    assert by_key[("mixed.txt", 5)] == f"{MAX_WORDS + 1} words, more than --max_words={MAX_WORDS}"
    assert by_key[("mixed.txt", 6)] == f"RuntimeError: {TRIGGER} in the batch"


def test_an_over_long_line_is_a_dead_letter_between_parsed_neighbours(pipeline_run, corpus):
    _, records, errors, _ = pipeline_run
    parsed = {_key(corpus, r) for r in records}
    too_long = {_key(corpus, e): e["error"] for e in errors if e["reason"] == beam.TOO_LONG}
    assert too_long == {key: f"longer than --max_line_bytes={MAX_LINE_BYTES}"
                        for key in (("mixed.txt", 8), ("sub/zipped.txt.gz", 2))}
    assert {("mixed.txt", 7), ("mixed.txt", 9), ("sub/zipped.txt.gz", 1)} <= parsed


def test_each_tree_is_the_parsers_tree_for_its_line(pipeline_run, corpus, parser):
    _, records, _, _ = pipeline_run
    lines = _input_lines(corpus)
    lines[("mixed.txt", 1)] = lines[("mixed.txt", 1)].removeprefix(b"\xef\xbb\xbf")
    records.sort(key=lambda r: _key(corpus, r))
    sentences = [[escape_brackets(w) for w in lines[_key(corpus, r)].decode().split()]
                 for r in records]
    assert [r["tree"] for r in records] == parser.parse_to_strings(sentences)
    for record, words, tree in zip(records, sentences, parser.parse_sents(sentences)):
        assert nltk.Tree.fromstring(record["tree"]) == tree
        assert tree.leaves() == words
        assert isinstance(record["score"], float) and record["score"] <= 0


def test_a_failing_batch_loses_only_the_failing_sentence(pipeline_run, corpus):
    totals, records, _, _ = pipeline_run
    assert totals["batches_retried"] >= 1
    assert totals["rejected_model_error"] == 1
    parsed = {_key(corpus, r) for r in records}
    good = set(_input_lines(corpus)) - set(EXPECTED_REJECTED)
    assert parsed == good


def test_metrics_add_up(pipeline_run, corpus):
    totals, records, errors, _ = pipeline_run
    lines = _input_lines(corpus)
    assert totals["lines_read"] == len(lines)
    assert totals["files_read"] == len(INPUTS)
    assert totals["sentences_parsed"] == len(records)
    assert totals["words_parsed"] == sum(len(nltk.Tree.fromstring(r["tree"]).leaves())
                                         for r in records)
    for reason in beam.REJECT_REASONS:
        assert totals[f"rejected_{reason}"] == list(EXPECTED_REJECTED.values()).count(reason)
    assert totals["sentences_parsed"] + sum(
        totals[f"rejected_{reason}"] for reason in beam.REJECT_REASONS) == totals["lines_read"]
    assert len(errors) == len(EXPECTED_REJECTED)


def test_ordered_output_has_one_line_per_input_line(pipeline_run, corpus):
    _, records, _, output = pipeline_run
    trees = {_key(corpus, r): r["tree"] for r in records}
    for name in INPUTS:
        with open(f"{output}-ordered/{name}.trees", encoding="utf-8") as f:
            written = f.read().split("\n")
        assert written[-1] == ""
        numbers = sorted(n for file, n in _input_lines(corpus) if file == name)
        assert written[:-1] == [trees.get((name, n), "") for n in numbers]


def test_cli_ordered_output_equals_parse_byte_for_byte(export_dir, corpus, tmp_path, capsys):
    good = os.path.join(corpus, "good.txt")
    output = str(tmp_path / "trees")
    code = beam_parse.main([f"--model_dir={export_dir}", f"--input={good}",
                            f"--output={output}", "--ordered", "--batch_size=3"])
    printed = capsys.readouterr().out
    assert code == 0
    assert f"{len(GOOD_LINES)} of {len(GOOD_LINES)} lines parsed" in printed
    env = subprocess_env()
    result = subprocess.run([sys.executable, "-m", "tetra_tf.parse", f"--model_dir={export_dir}",
                             f"--input={good}"], capture_output=True, env=env, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr
    with open(f"{output}-ordered/good.txt.trees", "rb") as f:
        assert f.read() == result.stdout
    assert os.path.getsize(glob.glob(f"{output}-errors-*.jsonl")[0]) == 0


@pytest.mark.parametrize("args, message", [
    (["--input=X", "--output=Y"], "--model_dir"),
    (["--model_dir=MISSING", "--input=X", "--output=Y"], "holds no SavedModel"),
    (["--model_dir=EXPORT", "--input=NOWHERE/*.txt", "--output=Y"], "matches no file"),
    (["--model_dir=EXPORT", "--input=NOWHERE", "--output=Y", "--runer=x"], "--runer=x"),
    (["--model_dir=EXPORT", "--input=NOWHERE", "--output=Y", "--batch_size=0"], "positive"),
    (["--model_dir=EXPORT", "--input=NOWHERE", "--output=Y", "--max_line_bytes=0"],
     "--max_line_bytes must be positive"),
])
def test_cli_usage_errors_are_one_line(export_dir, args, message, capsys):
    args = [a.replace("EXPORT", export_dir) for a in args]
    assert beam_parse.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def _read_sentences(path, tokenize=False, max_words=0,
                    max_line_bytes=parse.DEFAULT_MAX_LINE_BYTES) -> list:
    """ReadSentences' outputs for one file, without a pipeline."""
    read = beam.ReadSentences(tokenize, max_words, max_line_bytes)
    read.setup()
    readable = fileio.ReadableFile(FileMetadata(str(path), os.path.getsize(path)))
    return list(read.process(readable))


def test_read_sentences_tokenizes_escapes_and_rejects(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b'Hi (there) "you"\r\na b c d e f g h\n')
    sentence, rejected = _read_sentences(path, tokenize=True, max_words=7)
    assert sentence == beam.Sentence(str(path), 1, "Hi -LRB- there -RRB- `` you ''", 7)
    assert rejected.tag == beam.ReadSentences.REJECTED
    assert rejected.value == beam.dead_letter(str(path), 2, beam.TOO_MANY_WORDS,
                                              "8 words, more than --max_words=7")
    path.write_bytes(b"a:-) b " + b"w " * 1000)
    (sentence,) = _read_sentences(path)
    assert sentence.text.startswith("a:--RRB- b w") and sentence.num_words == 1002


@pytest.mark.parametrize("suffix, compress", [
    ("txt", lambda data: data), ("txt.gz", gzip.compress), ("txt.bz2", bz2.compress),
    ("txt.xz", lambda data: lzma.compress(data, preset=1))])
def test_an_over_long_line_is_skipped_without_being_held(tmp_path, suffix, compress):
    size = 32 * 1024 * 1024
    path = tmp_path / f"in.{suffix}"
    # Compressed, the 32 MiB line takes a few KB: it must still be inflated in pieces.
    path.write_bytes(compress(b"before\n" + b"x " * (size // 2) + b"\nafter\n"))
    tracemalloc.start()
    try:
        outputs = _read_sentences(path, max_line_bytes=1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [o.text if isinstance(o, beam.Sentence) else o.value["reason"]
            for o in outputs] == ["before", beam.TOO_LONG, "after"]
    assert peak < 2 * 1024 * 1024, peak  # the line is 32 MiB


def test_ordered_root_and_paths(tmp_path):
    a, b = str(tmp_path / "x" / "a"), str(tmp_path / "x" / "b")
    root = beam.ordered_root([a + "/*.txt", b + "/**/*.gz"])
    assert root == str(tmp_path / "x") + "/"
    assert beam.ordered_path("out/t", root, b + "/c/d.gz") == "out/t-ordered/b/c/d.gz.trees"
    assert beam.ordered_root(["gs://bucket/a/*.txt"]) == "gs://bucket/a/"
