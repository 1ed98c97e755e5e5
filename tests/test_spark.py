"""Tests for tetra_tf/integrations/spark.py and tetra_tf/spark_parse.py on a real Spark standalone cluster.

The module starts one master and two workers of one core each on 127.0.0.1 (separate JVM
processes, pyspark's bundled `spark-class`; their process groups are ended at teardown) and
runs one job over a few hundred lines plus a bad line of every reason the reader and the
sentence contract give; most assertions share that run. Skipped where pyspark or a Java
runtime is missing.
"""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import random
import re
import subprocess
import sys
import threading
import zlib

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (the [spark] extra)")

from tetra_tf import spark_parse  # noqa: E402
from tetra_tf.contract import sentences
from tetra_tf.contract.parse_record import ParseResult  # noqa: E402
from tetra_tf.integrations import bulk_options
from tetra_tf.integrations import spark as tetra_spark  # noqa: E402
from tetra_tf.integrations.spark_cluster import LocalCluster  # noqa: E402
from conftest import (REPO_ROOT, assert_spans_are_the_parsers, run_module,  # noqa: E402
                      subprocess_env)


def _java_major() -> int:
    """The Java runtime's major version (0: none)."""
    try:
        result = subprocess.run(["java", "-version"], capture_output=True, text=True,
                                timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    match = re.search(r'version "(\d+)(?:\.(\d+))?', result.stderr)
    if not match:
        return 0
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


JAVA_NEEDED = 17 if int(pyspark.__version__.split(".")[0]) >= 4 else 8
if _java_major() < JAVA_NEEDED:
    pytest.skip(f"Spark {pyspark.__version__} needs a Java {JAVA_NEEDED}+ runtime (java on "
                "PATH); e.g. apt-get install openjdk-17-jre-headless", allow_module_level=True)

START_TIMEOUT = 120  # seconds for the master and the workers to come up
JOB_TIMEOUT = 300  # seconds for the job
MAX_WORDS = 20
MAX_LINE_BYTES = 200
PARTITIONS = 8
FLOOR = 0.05  # span_marginals' floor in the tests that ask for every labelled span
WORDS = ("the cat sat on mat she says he even left early Mr. Smith running is fun 3 dogs , "
         "2 cats and a bird -LRB- words -RRB- were quoted in `` text '' . ? !").split()


def _good_lines(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 15)))
            for _ in range(count)]


def _corpus_files() -> dict[str, tuple[bytes, dict[int, str]]]:
    """name → (bytes, {line number: expected reason}) for the refused lines."""
    plain = _good_lines(150, 1)
    bad = {10: ("", sentences.EMPTY), 20: ("  \t ", sentences.EMPTY),
           30: (b"caf\xe9 au lait", sentences.NOT_UTF8),
           40: ("x" * (MAX_LINE_BYTES + 50), sentences.TOO_LONG),
           50: (" ".join(["w"] * (MAX_WORDS + 1)), sentences.TOO_MANY_WORDS)}
    lines: list[bytes] = []
    for number, text in enumerate(plain, start=1):
        line = bad[number][0] if number in bad else text
        lines.append(line if isinstance(line, bytes) else line.encode())
    mixed = b"\n".join(lines) + b"\n"
    zipped = gzip.compress(("\n".join(_good_lines(120, 2)) + "\n").encode())
    # A truncated .gz: its readable lines, then one damaged row.
    long_text = ("\n".join(_good_lines(4000, 3)) + "\n").encode()
    damaged = gzip.compress(long_text)[:6000]
    return {"mixed.txt": (mixed, {n: reason for n, (_, reason) in bad.items()}),
            "sub/zipped.txt.gz": (zipped, {}),
            "sub/cut.txt.gz": (damaged, {}),
            "empty.txt": (b"", {})}  # no lines: no rows, an empty ordered file


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A master and two one-core workers, as separate processes (ended at teardown); they
    start while the tests' model is built (the `spark` fixture waits for them)."""
    cluster = LocalCluster(str(tmp_path_factory.mktemp("spark_cluster")), workers=2, cores=1,
                           memory="2g", timeout=START_TIMEOUT, env={"PYTHONPATH": REPO_ROOT},
                           wait=False)
    yield cluster
    cluster.stop()
    assert len(cluster.pids) == 3
    for pid in cluster.pids:  # the process groups are gone
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)


@pytest.fixture(scope="module")
def parser(tiny_export_dir):
    """The tiny export in this process: the trees and reasons the jobs' are compared with."""
    from tetra_tf.parser import Parser

    return Parser(tiny_export_dir)


@pytest.fixture(scope="module")
def spark(cluster, tiny_export_dir):
    del tiny_export_dir  # built while the cluster starts
    try:
        cluster.wait()
    except RuntimeError as e:
        pytest.fail(f"the Spark cluster did not start: {e}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARK_LOCAL_IP", "127.0.0.1")  # else the driver binds the outside address
        patch.setenv("PYSPARK_PYTHON", sys.executable)
        session = spark_parse.session(cluster.url, {
            "spark.executor.cores": "1", "spark.cores.max": "2", "spark.executor.memory": "1g",
            "spark.executorEnv.PYTHONPATH": REPO_ROOT, "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false", "spark.task.maxFailures": "1"})
        yield session
        session.stop()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark_corpus")
    files = _corpus_files()
    for name, (data, _) in files.items():
        os.makedirs(os.path.dirname(root / name), exist_ok=True)
        (root / name).write_bytes(data)
    return str(root), files


@pytest.fixture(scope="module")
def job(spark, corpus, tiny_export_dir, tmp_path_factory):
    """One run of spark_parse.run over the corpus: (summary, rows by (name, line), output)."""
    root, _ = corpus
    folder = str(tmp_path_factory.mktemp("spark_out"))
    output = os.path.join(folder, "trees")
    # A relative output is relative to the driver's folder (this process's and its JVM's),
    # not to each executor's.
    watchdog = threading.Timer(JOB_TIMEOUT, spark.sparkContext.cancelAllJobs)
    watchdog.start()  # a job that hangs (no executors ...) is cancelled: the tests fail
    try:
        summary = spark_parse.run(
            spark, tiny_export_dir, [os.path.join(root, "*.txt"), os.path.join(root, "sub")],
            os.path.relpath(output), output_format="json", ordered=True, max_words=MAX_WORDS,
            max_line_bytes=MAX_LINE_BYTES, batch_size=8, partitions=PARTITIONS)
    finally:
        watchdog.cancel()
    rows = []
    for path in glob.glob(os.path.join(output, "part-*.json")):
        with open(path, encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f)
    return summary, rows, output


def _expected_lines(corpus) -> dict[tuple[str, int], bytes | None]:
    """(name, line) → raw line, read here without Spark; the damaged file's last entry
    (where the damage starts) is None."""
    _, files = corpus
    lines: dict[tuple[str, int], bytes | None] = {}
    for name, (data, _) in files.items():
        damaged = False
        if name.endswith(".gz"):
            decompressor = zlib.decompressobj(wbits=31)
            data = decompressor.decompress(data)
            damaged = not decompressor.eof
        complete = data.split(b"\n")
        if damaged:  # the partial last line is not read: the damage starts there
            complete = complete[:-1]
        elif complete[-1] == b"":
            complete = complete[:-1]
        for number, raw in enumerate(complete, start=1):
            lines[(name, number)] = raw
        if damaged:
            lines[(name, len(complete) + 1)] = None
    return lines


def _key(root: str, row: dict) -> tuple[str, int]:
    return os.path.relpath(row["file"].removeprefix("file:"), root), row["line"]


def test_every_line_is_in_the_output_exactly_once(job, corpus):
    summary, rows, _ = job
    root, _ = corpus
    keys = [_key(root, row) for row in rows]
    assert len(keys) == len(set(keys))
    assert set(keys) == set(_expected_lines(corpus))
    assert summary["lines"] == len(rows) > 400
    for row in rows:  # a tree and score, or a reason and error: never both
        assert (row.get("tree") is None) == (row.get("score") is None) == (
            row.get("reason") is not None) == (row.get("error") is not None)


def test_refused_lines_have_their_reasons(job, corpus):
    summary, rows, _ = job
    root, files = corpus
    refused = {_key(root, row): row["reason"] for row in rows if row.get("reason")}
    expected = {("mixed.txt", n): reason for n, reason in files["mixed.txt"][1].items()}
    damaged = max(n for name, n in _expected_lines(corpus) if name == "sub/cut.txt.gz")
    expected[("sub/cut.txt.gz", damaged)] = sentences.DAMAGED
    assert refused == expected
    assert damaged > 50  # the readable lines before the damage were parsed
    detail = {_key(root, row): row["error"] for row in rows if row.get("reason")}
    assert detail[("mixed.txt", 30)] == "not UTF-8 (byte 0xE9 at byte 4)"
    assert detail[("sub/cut.txt.gz", damaged)].endswith(f"{damaged - 1} lines were read "
                                                        "before it")
    assert summary["refused"] == dict(collections.Counter(expected.values()))


def test_trees_are_the_parsers(job, corpus, parser):
    _, rows, _ = job
    root, _ = corpus
    lines = _expected_lines(corpus)
    parsed = sorted((row for row in rows if row.get("tree")), key=lambda r: _key(root, r))
    words = [lines[_key(root, row)].decode().split() for row in parsed]
    expected = parser.parse_each(words)
    assert [row["tree"] for row in parsed] == [result.bracketed for result in expected]
    assert [row["score"] for row in parsed] == pytest.approx(
        [result.score for result in expected], abs=1e-5)


def test_the_model_is_loaded_once_per_worker_process(job, cluster):
    summary, _, _ = job
    loads = summary["loads"]
    processes = {(host, pid) for host, pid, _ in loads}
    assert len(loads) == len(processes)  # no process loaded it twice
    assert 1 <= len(processes) <= 2  # two executors of one core: one Python worker each
    assert PARTITIONS > len(loads)  # fewer loads than parse tasks
    logged = re.findall(r"tetra_tf\.integrations\.spark: loaded the parser from .* \(host (\S+), "
                        r"process "
                        r"(\d+); 1 core(; ahead of the parse)?\)", cluster.worker_stderr())
    assert sorted((host, int(pid)) for host, pid, _ in logged) == sorted(processes)
    # warm_workers' tasks come first, and a parse task reuses the Python worker of one
    assert any(ahead for _, _, ahead in logged)


@pytest.mark.slow
def test_a_load_is_logged_on_stderr_where_logging_is_not_configured(tiny_export_dir):
    """A process that configured no logging (a Spark Python worker) gets each load as one
    line on its stderr; a failed load ahead of the parse is a warning there."""
    code = ("import sys\nfrom tetra_tf.integrations import spark\n"
            "spark._load_ahead(sys.argv[2], None)\nspark.get_parser(sys.argv[1])\n")
    result = subprocess.run([sys.executable, "-c", code, tiny_export_dir, "/nowhere"],
                            capture_output=True, text=True, env=subprocess_env(), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert re.fullmatch(r"tetra_tf\.integrations\.spark: loading the parser from /nowhere ahead of "
                        r"the parse "
                        r"failed \(ExportError: .*\); the parse will load it", lines[0]), lines
    assert re.fullmatch(r"tetra_tf\.integrations\.spark: loaded the parser from "
                        rf"{re.escape(tiny_export_dir)} in [\d.]+ s \(host \S+, process \d+; "
                        r"TensorFlow's threads as they "
                        r"were\)", lines[-1]), lines


def test_ordered_output_has_a_line_per_input_line(job, corpus):
    summary, rows, output = job
    root, files = corpus
    by_key = {_key(root, row): row for row in rows}
    lines = _expected_lines(corpus)
    for name in files:
        with open(os.path.join(bulk_options.ordered_folder(output), name + ".trees"),
                  encoding="utf-8") as f:
            written = f.read().split("\n")
        assert written[-1] == ""
        numbers = sorted(n for file, n in lines if file == name)
        assert written[:-1] == [by_key[(name, n)].get("tree") or "" for n in numbers]
    assert sorted(os.path.relpath(path.removeprefix("file:"), root)
                  for path in summary["ordered_files"]) == sorted(files)


def test_an_empty_input_file_gets_an_empty_ordered_file(job):
    """The ordered output promises a file per input file: issue 30, item 7b."""
    _, _, output = job
    assert os.path.getsize(os.path.join(bulk_options.ordered_folder(output),
                                        "empty.txt.trees")) == 0


# Before the model-failure test: a Python worker whose task raised exits, so this job
# still finds workers that hold the model instead of starting and loading new ones.
def test_odd_lines_get_the_parsers_tree_or_reason(spark, tiny_export_dir, parser, tmp_path):
    """Spark as a way in, as in test_ways_in: every whitespace character inside a line,
    format characters, brackets, emoji, an over-long word and sentence, empty lines."""
    from test_ways_in import _answer, _parser_answers, odd_lines

    lines = odd_lines(parser.sentence_limits.max_pieces)
    corpus = tmp_path / "odd.txt"
    corpus.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    output = str(tmp_path / "out")
    summary = spark_parse.run(spark, tiny_export_dir, [str(corpus)], output,
                              output_format="json", partitions=2)
    assert summary["lines"] == len(lines)
    answers = {}
    for path in glob.glob(os.path.join(output, "part-*.json")):
        with open(path, encoding="utf-8") as f:
            for row in map(json.loads, f):
                answers[row["line"]] = (_answer(row["tree"]) if row.get("tree")
                                        else _answer(reason=row["reason"]))
    expected = _parser_answers(parser, lines)
    for number, (line, want) in enumerate(zip(lines, expected), start=1):
        assert answers[number] == want, line[:80]


def test_documents_give_a_row_per_sentence_as_the_parse_cli_does(spark, tiny_export_dir,
                                                                  parser, tmp_path):
    """A row per sentence, as the parse CLI gives; with span_marginals (asked for in this
    run; it implies marginals), each parsed row also has the Parser's marginals and labelled
    spans for its sentence, a refused row null."""
    texts = ["It rained. We left (early).", "", "He said \u201cno.\u201d Then he went.",
             "Fine. " + " ".join(["W"] * 9) + "."]
    corpus = tmp_path / "docs.txt"
    corpus.write_bytes(("\n".join(texts) + "\n").encode("utf-8") + b"caf\xe9\n")
    output = str(tmp_path / "out")
    summary = spark_parse.run(spark, tiny_export_dir, [str(corpus)], output,
                              output_format="json", max_words=8, partitions=2,
                              documents=True, span_marginals=FLOOR)
    rows = spark_parse.read_output(spark, output, "json", documents=True,
                                   span_marginals=FLOOR).collect()
    found = sorted(((r.line, r.sentence_number, r.start, r.end, r.tree, r.reason)
                    for r in rows), key=lambda row: (row[0], row[1] or 0))
    expected = [(number, index, s.start, s.end, s.result.bracketed, None)
                for number, document in enumerate(parser.parse_texts(texts[:3]), start=1)
                for index, s in enumerate(document, start=1)]
    fine = parser.parse_each([["Fine", "."]])[0].bracketed
    assert found == expected + [(4, 1, 0, 6, fine, None),
                                (4, 2, 6, 24, None, sentences.TOO_MANY_WORDS),
                                (5, None, None, None, None, sentences.NOT_UTF8)]
    assert len(expected) == 4  # the blank line 2 has no sentence
    assert summary["lines"] == len(found) == 7 and summary["parsed"] == 5
    by_tree = {(r.line, r.sentence_number): r for r in rows}
    results = [(number, index, s) for number, document in enumerate(
        parser.parse_texts(texts[:3] + ["Fine."], marginals=True), start=1)
        for index, s in enumerate(document, start=1) if (number, index) != (4, 2)]
    assert len(results) == 5
    every = parser.parse_each([s.words for _, _, s in results], span_marginals=0.0)
    for (number, index, sentence), spans in zip(results, every):
        row, result = by_tree[(number, index)], sentence.result
        assert row.tree == result.bracketed
        assert row.tree_probability == pytest.approx(result.tree_probability, abs=1e-6)
        assert row.constituent_marginals == pytest.approx(
            list(result.constituent_marginals), abs=1e-6)
        assert_spans_are_the_parsers([span.asDict() for span in row.span_marginals],
                                     spans.span_marginals, FLOOR)
    for key in ((4, 2), (5, None)):  # refused: no marginals, no spans
        assert by_tree[key].tree_probability is None
        assert by_tree[key].constituent_marginals is None
        assert by_tree[key].span_marginals is None


def test_a_model_failure_fails_the_job(spark, corpus, tmp_path):
    root, _ = corpus
    not_a_model = tmp_path / "model"
    not_a_model.mkdir()  # the workers cannot load it
    with pytest.raises(Exception) as raised:
        spark_parse.run(spark, str(not_a_model), [os.path.join(root, "mixed.txt")],
                        str(tmp_path / "out"), partitions=2)
    message = spark_parse._job_error(raised.value)
    assert message.startswith("the Spark job failed: tetra_tf.errors.ExportError: ")
    assert str(not_a_model) in message and "no SavedModel (saved_model.pb)" in message
    assert not glob.glob(str(tmp_path / "out" / "part-*"))


class _BrokenParser:
    """A Parser whose model fails (not a refused sentence)."""
    sentence_limits = sentences.SentenceLimits()

    def parse_each(self, words, batch_size=64, limits=None, progress=None, marginals=False,
                   span_marginals=None):
        raise RuntimeError("the model broke")


def test_the_adapter_lets_a_model_failure_through(monkeypatch):
    import pyarrow as pa

    monkeypatch.setitem(tetra_spark._parsers, "broken", _BrokenParser())
    batch = pa.RecordBatch.from_arrays([pa.array(["a b", "c"])], names=["sentence"])
    partition = tetra_spark._ParsePartition("broken", "sentence", 8, 0, False, None)
    with pytest.raises(RuntimeError, match="the model broke"):
        list(partition(iter([batch])))


def test_cli_usage_errors_are_one_line(tmp_path, tiny_export_dir):
    result = run_module("tetra_tf.spark_parse", f"--model_dir={tmp_path}",
                        "--input=x", f"--output={tmp_path / 'o'}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --model_dir: {tmp_path} holds no SavedModel (saved_model.pb); export one "
        "with python -m tetra_tf.export"]
    result = run_module("tetra_tf.spark_parse", f"--model_dir={tiny_export_dir}",
                        f"--output={tmp_path / 'o'}")
    assert result.returncode == 2 and "--input is required" in result.stderr
    result = run_module("tetra_tf.spark_parse", "--format=csv")
    assert result.returncode == 2 and result.stderr.startswith("error: ")
    result = run_module("tetra_tf.spark_parse", f"--model_dir={tiny_export_dir}", "--input=x",
                        f"--output={tmp_path / 'o'}", "--span_marginals=1.5")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --span_marginals is a probability from 0 to 1, got 1.5"]
    result = run_module("tetra_tf.spark_parse", "--help")
    assert result.returncode == 0 and "--ordered" in result.stdout


class _RecordingParser:
    """A Parser stand-in that records the words it is given and refuses "REFUSE"."""
    sentence_limits = sentences.SentenceLimits(max_pieces=50)

    def __init__(self):
        self.calls = []

    def parse_each(self, words, batch_size=64, limits=None, progress=None, marginals=False,
                   span_marginals=None):
        self.calls.append((words, batch_size))
        return [sentences.SentenceError(sentences.REJECTED, "no") if "REFUSE" in sentence
                else ParseResult(" ".join(sentence), -1.0, [], [], [])
                for sentence in words]


def test_parse_texts_applies_the_sentence_contract():
    parser = _RecordingParser()
    results = tetra_spark.parse_texts(
        parser, ["Hello, (world).", None, " \t", "a b c d e f g", "x REFUSE", "w " * 60],
        batch_size=3, max_words=6, tokenize=True)
    assert parser.calls == [([["Hello", ",", "-LRB-", "world", "-RRB-", "."],
                              ["x", "REFUSE"]], 3)]
    assert results[0] == ("Hello , -LRB- world -RRB- .", -1.0)
    reasons = [getattr(result, "reason", None) for result in results]
    assert reasons == [None, sentences.EMPTY, sentences.EMPTY, sentences.TOO_MANY_WORDS,
                       sentences.REJECTED, sentences.TOO_MANY_WORDS]
    parser = _RecordingParser()  # the export's limit: 60 words are at least 60 pieces
    (result,) = tetra_spark.parse_texts(parser, ["w " * 60])
    assert result.reason == sentences.TOO_MANY_PIECES and parser.calls == []


def test_parse_texts_gives_the_parsers_marginals_and_spans(parser):
    """parse_texts (what each Arrow batch goes through) with marginals, or span_marginals
    (which implies them): each parsed text's values are the Parser's; a sentence over
    parse_span_marginals' bound is refused alone (too_many_words)."""
    from tetra_tf.contract.export_format import MAX_MARGINALS_WORDS

    texts = ["The cat sat on the mat .", " ".join(["w"] * (MAX_MARGINALS_WORDS + 1)), None,
             "Hi !"]
    words = [texts[0].split(), texts[3].split()]
    with_marginals = parser.parse_each(words, marginals=True)
    every = parser.parse_each(words, span_marginals=0.0)
    marginals_only = tetra_spark.parse_texts(parser, texts, marginals=True)
    spans = tetra_spark.parse_texts(parser, texts, span_marginals=FLOOR)
    for results in (marginals_only, spans):
        assert [getattr(result, "reason", None) for result in results] == [
            None, sentences.TOO_MANY_WORDS, sentences.EMPTY, None]
    for index, result, spans_alone in ((0, with_marginals[0], every[0]),
                                       (3, with_marginals[1], every[1])):
        assert len(marginals_only[index]) == 4 and len(spans[index]) == 5
        for values in (marginals_only[index], spans[index]):
            tree, score, tree_probability, constituent_marginals = values[:4]
            assert (tree, score) == (result.bracketed, pytest.approx(result.score, abs=1e-4))
            assert tree_probability == pytest.approx(result.tree_probability, abs=1e-6)
            assert constituent_marginals == pytest.approx(list(result.constituent_marginals),
                                                          abs=1e-6)
        assert_spans_are_the_parsers(spans[index][4], spans_alone.span_marginals, FLOOR)


def test_parse_column_adds_the_marginals_columns_only_when_asked(spark, tiny_export_dir):
    df = spark.createDataFrame([(1, "a b")], "id long, sentence string")
    plain = tetra_spark.parse_column(df, tiny_export_dir)  # lazy: no job runs
    assert plain.columns == ["id", "sentence", *tetra_spark.PARSE_COLUMNS]
    with_marginals = tetra_spark.parse_column(df, tiny_export_dir, marginals=True)
    assert [(f.name, f.dataType.simpleString()) for f in with_marginals.schema.fields] == [
        ("id", "bigint"), ("sentence", "string"), ("tree", "string"), ("score", "double"),
        ("tree_probability", "double"), ("constituent_marginals", "array<double>"),
        ("reason", "string"), ("error", "string")]
    with_spans = tetra_spark.parse_column(df, tiny_export_dir, span_marginals=0.5)
    assert [(f.name, f.dataType.simpleString()) for f in with_spans.schema.fields] == [
        ("id", "bigint"), ("sentence", "string"), ("tree", "string"), ("score", "double"),
        ("tree_probability", "double"), ("constituent_marginals", "array<double>"),
        ("span_marginals", "array<struct<label:string,start:int,end:int,probability:double>>"),
        ("reason", "string"), ("error", "string")]
    span_type = with_spans.schema["span_marginals"].dataType.simpleString()
    assert tetra_spark.SPAN_MARGINALS_TYPE == span_type
    assert spark_parse.output_columns() == ["file", "line", *tetra_spark.PARSE_COLUMNS]
    assert spark_parse.output_columns(span_marginals=0.0) == [
        "file", "line", "tree", "score", "tree_probability", "constituent_marginals",
        "span_marginals", "reason", "error"]
    for bad in (1.5, float("nan")):  # refused on the driver, before any job
        with pytest.raises(ValueError, match="span_marginals is a probability from 0 to 1"):
            tetra_spark.parse_column(df, tiny_export_dir, span_marginals=bad)
        with pytest.raises(ValueError, match="span_marginals is a probability from 0 to 1"):
            spark_parse.run(spark, tiny_export_dir, ["nowhere"], "nowhere-out",
                            span_marginals=bad)


def test_parse_column_checks_its_column(spark, tiny_export_dir):
    df = spark.createDataFrame([(1, b"bytes")], "id long, sentence binary")
    with pytest.raises(ValueError, match="no column 'text' \\(columns: id, sentence\\)"):
        tetra_spark.parse_column(df, tiny_export_dir, text_column="text")
    with pytest.raises(ValueError, match="column 'sentence' is binary, not string"):
        tetra_spark.parse_column(df, tiny_export_dir)


def test_parse_column_parses_with_the_packaged_model_without_one(spark):
    from tetra_tf.parser import Parser

    words = "The cat sat on the mat .".split()
    df = spark.createDataFrame([(1, " ".join(words))], "id long, sentence string")
    (row,) = tetra_spark.parse_column(df).collect()
    assert row.reason is None, row.error
    (expected,) = Parser().parse_each([words])
    assert row.tree == expected.bracketed
