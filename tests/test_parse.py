"""Tests for tetra_tf/parse.py: the command-line parser."""

import bz2
import dataclasses
import gzip
import json
import inspect
import io
import lzma
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import nltk
import pytest
import tensorflow as tf

from tetra_tf import parse
from tetra_tf.contract import export_format, sentences
from tetra_tf.contract.parse_record import Constituent, ParseResult
from tetra_tf.errors import ExportError
from tetra_tf.integrations import bulk_options
from tetra_tf.parser import Parser
from tetra_tf.trees import evalb
from tetra_tf.trees.treebank import with_pos_tags

sys.path.insert(0, os.path.dirname(__file__))
import tiny_model  # noqa: E402
from conftest import parse_with_copies_of, run_cli, subprocess_env  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINES = ["The cat sat on the mat .", "Hi", "-LRB- 1\\/2 -RRB-  ``quoted''", "a :-) b"]


@pytest.fixture(scope="module")
def export_dir(tiny_export_dir):
    return tiny_export_dir  # conftest's shared tiny export


def _cli(*args, stdin: str | bytes = ""):
    """Runs the CLI as a program; stdout and stderr come back as text (decoded as UTF-8)."""
    env = subprocess_env()
    data = stdin if isinstance(stdin, bytes) else stdin.encode("utf-8")
    result = subprocess.run([sys.executable, "-m", "tetra_tf.parse", *args], input=data,
                            capture_output=True, env=env, timeout=300)
    return subprocess.CompletedProcess(result.args, result.returncode,
                                       result.stdout.decode("utf-8"),
                                       result.stderr.decode("utf-8"))


def _cli_here(*args, stdin: str | bytes = "", parser: Parser | None = None):
    """Runs the CLI's flags and main in this process (no new Python and TensorFlow).

    With parser (the module's, of the export --model_dir names), the run parses with it
    where it would load the export again: its flags, reading, formatting and messages are
    what these runs check; the program's own load is the `_cli` runs' (a new process).
    """
    if parser is None:
        return run_cli(parse.define_flags, parse.main, *args, stdin=stdin)

    def load_parser(model_dir: str) -> Parser:
        assert model_dir == parser.export_dir, model_dir
        return parser

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(parse, "load_parser", load_parser)
        return run_cli(parse.define_flags, parse.main, *args, stdin=stdin)


@pytest.fixture(scope="module")
def parser(export_dir):
    return Parser(export_dir)


@pytest.fixture
def loaded_once(parser, monkeypatch):
    """In the test, a Parser made of the tiny export (tools/eval_export.py's) is a copy of
    the module's: the export loaded once (eval_export's own load is tests/
    test_evaluate_export.py's bfloat16 export's)."""
    parse_with_copies_of(parser, monkeypatch)


def _run(parser, text, **kwargs) -> list[str]:
    output = io.StringIO()
    parse.run(parser.export_dir, io.StringIO(text), output, parser=parser, **kwargs)
    return output.getvalue().split("\n")[:-1]


def _run_bytes(parser, data: bytes, **kwargs) -> tuple[list[str], list[str], parse.Summary]:
    """Runs on binary input (as the CLI does); returns output lines, error lines, summary."""
    output, errors = io.BytesIO(), io.StringIO()
    summary = parse.run("unused", io.BytesIO(data), output, parser=parser, errors_file=errors,
                        **kwargs)
    return (output.getvalue().decode("utf-8").split("\n")[:-1], errors.getvalue().splitlines(),
            summary)


class FakeParser(Parser):
    """Parser with a fake model: a flat tree per sentence; the "graph" refuses a call that
    holds a sentence with the word 'POISON' (InvalidArgumentError, as its checks do).

    Parser's own checks, batching and retry (`parse_each`) run over the fake model calls.
    """

    def __init__(self, on_call=None):  # pylint: disable=super-init-not-called (no SavedModel)
        self.calls: list[list[int]] = []  # per call, each sentence's number of words
        self._on_call = on_call
        self.concurrent_calls = 1  # One call at a time: `calls` is in batch order.
        self._export_limits = {}  # No graph bounds: batches of batch_size sentences.
        self._sentence_limits = sentences.SentenceLimits()

    def _call(self, joined):
        word_lists = [sentence.split(" ") for sentence in joined]
        self.calls.append([len(words) for words in word_lists])
        if self._on_call is not None:
            self._on_call()
        if any("POISON" in words for words in word_lists):
            raise tf.errors.InvalidArgumentError(None, None,
                                                 "POISON is not a word\nsecond line")
        return [ParseResult(_flat(" ".join(words)), 0.0, ["X"] * len(words),
                            ["l"] * len(words), ["i"] * (len(words) - 1))
                for words in word_lists]


def _flat(words: str) -> str:
    return "(TOP " + " ".join(f"(X {word})" for word in words.split()) + ")"


def test_one_tree_per_line_in_order(parser):
    lines = _run(parser, "\n".join(LINES) + "\n", batch_size=2)
    assert len(lines) == len(LINES)
    expected_leaves = [line.split() for line in LINES]
    expected_leaves[3][1] = ":--RRB-"  # brackets inside tokens are escaped in the leaves
    for line, leaves in zip(lines, expected_leaves):
        tree = nltk.Tree.fromstring(line)
        assert tree.label() == "TOP" and tree.leaves() == leaves
    # The model gets the words as given (":-)"), as from the Python API.
    assert lines == [r.bracketed for r in parser.parse_each([line.split() for line in LINES])]


def test_last_line_without_newline_and_crlf(parser):
    assert len(_run(parser, "a b\r\nc d")) == 2


def test_bom_crlf_and_bad_bytes_in_binary_input(parser):
    data = b"\xef\xbb\xbfThe cat\r\ncaf\xe9 au lait\nHi \xef\xbb\xbf\r\nlast"
    out, errors, summary = _run_bytes(parser, data, on_error="skip")
    assert [nltk.Tree.fromstring(line).leaves() if line else None for line in out] == [
        ["The", "cat"], None, ["Hi", "\ufeff"], ["last"]]  # only the first BOM is dropped
    assert errors == ["line 2: not_utf8: not UTF-8 (byte 0xE9 at byte 4)"]
    assert (summary.lines, summary.trees, dict(summary.bad)) == (4, 3, {sentences.NOT_UTF8: 1})
    with pytest.raises(parse.BadLineError, match="line 2: not_utf8: not UTF-8") as raised:
        _run_bytes(parser, data)
    assert raised.value.trees_written == 1
    assert raised.value.error.reason == sentences.NOT_UTF8


def test_tokenize_raw_text(parser):
    text = 'He said, "Hello (world)" -- it costs $5.50.\n'
    (line,) = _run(parser, text, tokenize=True)
    assert nltk.Tree.fromstring(line).leaves() == [
        "He", "said", ",", "``", "Hello", "-LRB-", "world", "-RRB-", "''", "--", "it",
        "costs", "$", "5.50", "."]


def test_documents_give_one_line_per_sentence_with_ids_and_offsets():
    lines = ["It rained. We left (early).", "", "\udcff", "Fine. W w w w w w w .", "Ok."]
    data = b"\n".join(line.encode("utf-8", "surrogateescape") for line in lines) + b"\n"
    output, errors = io.BytesIO(), io.StringIO()
    summary = parse.run("unused", io.BytesIO(data), output, parser=FakeParser(),
                        on_error="skip", errors_file=errors, max_words=6, documents=True)
    assert output.getvalue().decode("utf-8").split("\n")[:-1] == [
        "1\t1\t0\t11\t" + _flat("It rained ."),
        "1\t2\t11\t27\t" + _flat("We left -LRB- early -RRB- ."),
        "4\t1\t0\t6\t" + _flat("Fine ."),
        "4\t2\t6\t21\t",  # refused: its reason goes to the errors
        "5\t1\t0\t3\t" + _flat("Ok ."),
    ]  # the blank line 2 has no sentences; line 3 is no text
    assert errors.getvalue().splitlines() == [
        "line 3: not_utf8: not UTF-8 (byte 0xFF at byte 1)",
        "line 4: sentence 2: too_many_words: 8 words, more than max_words=6"]
    assert (summary.lines, summary.trees) == (5, 4)
    assert dict(summary.bad) == {sentences.NOT_UTF8: 1, sentences.TOO_MANY_WORDS: 1}
    assert str(summary).startswith("parsed 4 sentences in 5 lines; skipped 2")
    with pytest.raises(parse.BadLineError, match="^line 4: sentence 2: too_many_words"):
        parse.run("unused", io.BytesIO(data.replace(b"\xff", b"x")), io.BytesIO(),
                  parser=FakeParser(), max_words=6, documents=True)


def test_cli_documents_flag(export_dir, parser):
    text = "It rained. We left (early)."
    result = _cli_here(f"--model_dir={export_dir}", "--documents", "--scores", stdin=text,
                       parser=parser)
    assert result.returncode == 0, result.stderr
    expected = [f"1\t{i}\t{s.start}\t{s.end}\t{parse.format_result(s.result, scores=True)}"
                for i, s in enumerate(parser.parse_text(text), start=1)]
    assert result.stdout.splitlines() == expected and len(expected) == 2
    # A bad line stops the run, saying what went out and what skipping would write.
    result = _cli_here(f"--model_dir={export_dir}", "--documents",
                       stdin=text.encode() + b"\ncaf\xe9\n", parser=parser)
    assert result.returncode == 2 and result.stderr.splitlines() == [
        "error: line 2: not_utf8: not UTF-8 (byte 0xE9 at byte 4); stopped: 2 trees went to "
        "stdout before it (--on_error=skip writes an empty tree for a bad sentence, nothing "
        "for a bad line and goes on)"]
    result = _cli_here(f"--model_dir={export_dir}", "--documents", "--tokenize", stdin=text,
                       parser=parser)
    assert result.returncode == 2 and "leave out --tokenize" in result.stderr


def test_cli_marginals_flag(export_dir, parser):
    """--marginals: the tree's and each constituent's probability before the tree, as
    Parser.parse_each(marginals=True) gives them; with --scores, after the score."""
    lines = ["The cat sat on the mat .", "Hi", "a b"]
    result = _cli_here(f"--model_dir={export_dir}", "--marginals", "--scores",
                       stdin="\n".join(lines) + "\n", parser=parser)
    assert result.returncode == 0, result.stderr
    expected = parser.parse_each([line.split() for line in lines], marginals=True)
    rows = [row.split("\t") for row in result.stdout.splitlines()]
    assert len(rows) == len(lines)
    for (score, tree_probability, constituents, tree), parsed in zip(rows, expected):
        assert tree == parsed.bracketed and float(score) == pytest.approx(parsed.score,
                                                                          abs=1e-4)
        assert float(tree_probability) == pytest.approx(parsed.tree_probability, abs=1e-4)
        assert [float(p) for p in constituents.split()] == pytest.approx(
            list(parsed.constituent_marginals), abs=1e-4)
    # With --documents: the same columns after the sentence's ids and offsets.
    text = "It rained. We left."
    result = _cli_here(f"--model_dir={export_dir}", "--documents", "--marginals", stdin=text,
                       parser=parser)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"1\t{i}\t{s.start}\t{s.end}\t{parse.format_result(s.result, marginals=True)}"
        for i, s in enumerate(parser.parse_text(text, marginals=True), start=1)]


def _spans_column(column: str) -> list[tuple[str, int, int, float]]:
    """--span_marginals' column read back: (label, start, end, probability) per span."""
    spans = []
    for span in column.split():
        start, end, rest = span.split(":", 2)
        label, probability = rest.rsplit(":", 1)
        spans.append((label, int(start), int(end), float(probability)))
    return spans


def test_cli_span_marginals_flag(export_dir, parser):
    """--span_marginals=P: the --marginals columns, then every labelled span of at least P
    as START:END:LABEL:PROBABILITY, as Parser.parse_each(span_marginals=P) gives them, in
    its order; with --scores, after the score; with --documents, after the offsets."""
    lines = ["The cat sat on the mat .", "Hi", "a b"]
    word_lists = [line.split() for line in lines]
    for floor in (0.0, 0.3):
        result = _cli_here(f"--model_dir={export_dir}", f"--span_marginals={floor}",
                           "--scores", stdin="\n".join(lines) + "\n", parser=parser)
        assert result.returncode == 0, result.stderr
        expected = parser.parse_each(word_lists, span_marginals=floor)
        rows = [row.split("\t") for row in result.stdout.splitlines()]
        assert len(rows) == len(lines) and all(len(row) == 5 for row in rows)
        for (score, tree_probability, constituents, spans, tree), parsed in zip(rows,
                                                                                  expected):
            assert tree == parsed.bracketed
            assert float(score) == pytest.approx(parsed.score, abs=1e-4)
            assert float(tree_probability) == pytest.approx(parsed.tree_probability,
                                                            abs=1e-4)
            assert [float(p) for p in constituents.split()] == pytest.approx(
                list(parsed.constituent_marginals), abs=1e-4)
            written = _spans_column(spans)
            assert [span[:3] for span in written] == [
                (c.label, c.start, c.end) for c in parsed.span_marginals]  # and its order
            assert [span[3] for span in written] == pytest.approx(
                [c.probability for c in parsed.span_marginals], abs=1e-4)
            assert all(p >= floor for *_, p in written)
        if floor:
            # Not every span the model admits reaches the floor.
            every = parser.parse_each(word_lists, span_marginals=0.0)
            assert sum(map(len, (r.span_marginals for r in expected))) < sum(
                map(len, (r.span_marginals for r in every)))
    # --marginals besides changes nothing.
    result = _cli_here(f"--model_dir={export_dir}", "--span_marginals=0.3", "--marginals",
                       stdin="\n".join(lines) + "\n", parser=parser)
    assert result.stdout.splitlines() == [parse.format_result(r, span_marginals=True)
                                          for r in expected]
    # With --documents: the same columns after the sentence's ids and offsets.
    text = "It rained. We left."
    result = _cli_here(f"--model_dir={export_dir}", "--documents", "--scores",
                       "--span_marginals=0.1", stdin=text, parser=parser)
    assert result.returncode == 0, result.stderr
    sentences_ = parser.parse_text(text, span_marginals=0.1)
    assert result.stdout.splitlines() == [
        f"1\t{i}\t{s.start}\t{s.end}\t"
        f"{parse.format_result(s.result, scores=True, span_marginals=True)}"
        for i, s in enumerate(sentences_, start=1)]
    rows = [row.split("\t") for row in result.stdout.splitlines()]
    assert len(rows) == 2 and all(len(row) == 9 for row in rows)
    for row, sentence in zip(rows, sentences_):
        assert _spans_column(row[7]) == [
            (c.label, c.start, c.end, pytest.approx(c.probability, abs=1e-4))
            for c in sentence.result.span_marginals]


def test_format_result_writes_spans_after_the_marginals():
    tree = "(TOP (NP (X a) (X b)))"
    result = ParseResult(tree, -0.5, ["X", "X"], ["l", "l"], ["i"], tree_probability=0.5,
                         constituent_marginals=(0.75,),
                         span_marginals=(Constituent("NP", 0, 1, 0.75),
                                         Constituent("X-Y", 1, 1, 0.0625)))
    assert parse.format_result(result, scores=True, span_marginals=True) == (
        f"-0.5000\t0.5000\t0.7500\t0:1:NP:0.7500 1:1:X-Y:0.0625\t{tree}")
    # No span reaches the floor: an empty column.
    empty = dataclasses.replace(result, span_marginals=())
    assert parse.format_result(empty, span_marginals=True) == f"0.5000\t0.7500\t\t{tree}"


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
def test_cli_span_marginals_outside_0_1_is_a_usage_error(tmp_path, value):
    """A floor outside 0..1 is refused in one line, exit 2, before any model loads (the
    model directory here holds none)."""
    result = _cli_here(f"--model_dir={tmp_path}", f"--span_marginals={value}", stdin="a b\n")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: --span_marginals is a probability from 0 to 1, got {float(value)!r}"]
    assert result.stdout == ""


@pytest.mark.parametrize("text, line_number", [("a\n\nb\n", 2), ("a\n  \t\n", 2), ("\n", 1)])
def test_empty_line_fails_after_writing_the_lines_before_it(text, line_number):
    output = io.StringIO()
    with pytest.raises(parse.BadLineError,
                       match=f"^line {line_number}: empty: no words") as raised:
        parse.run("unused", io.StringIO(text), output, parser=FakeParser())
    assert raised.value.number == line_number
    assert raised.value.error.reason == sentences.EMPTY
    assert raised.value.trees_written == line_number - 1
    assert output.getvalue() == "".join(_flat(line) + "\n"
                                        for line in text.split("\n")[:line_number - 1])


def test_skip_keeps_line_numbers_and_reports_every_bad_line():
    lines = [b"a b", b"", b"c POISON d", b"e " * 5, b"  \t", b"\xff\xfe", b"f" * 40, b"g h"]
    output, errors = io.BytesIO(), io.StringIO()
    summary = parse.run("unused", io.BytesIO(b"\n".join(lines) + b"\n"), output,
                        parser=FakeParser(), on_error="skip", errors_file=errors,
                        max_words=4, max_line_bytes=30, batch_size=3)
    assert output.getvalue().decode("utf-8").split("\n")[:-1] == [
        _flat("a b"), "", "", "", "", "", "", _flat("g h")]
    assert errors.getvalue().splitlines() == [
        "line 2: empty: no words (give one sentence per line)",
        "line 3: rejected: POISON is not a word",
        "line 4: too_many_words: 5 words, more than max_words=4",
        "line 5: empty: no words (give one sentence per line)",
        "line 6: not_utf8: not UTF-8 (byte 0xFF at byte 1)",
        "line 7: too_long: longer than max_line_bytes=30"]
    assert (summary.lines, summary.trees) == (8, 2)
    assert summary.bad == {sentences.EMPTY: 2, sentences.REJECTED: 1,
                           sentences.TOO_MANY_WORDS: 1, sentences.NOT_UTF8: 1,
                           sentences.TOO_LONG: 1}
    assert str(summary) == ("parsed 2 of 8 lines; skipped 6 (empty: 2, not_utf8: 1, "
                            "rejected: 1, too_long: 1, too_many_words: 1)")


def test_a_rejected_batch_is_retried_one_sentence_at_a_time():
    fake = FakeParser()
    lines = ["x" * 7, "POISON", "y" * 7, "z " + "w" * 8]
    output, errors = io.StringIO(), io.StringIO()
    summary = parse.run("unused", io.StringIO("\n".join(lines) + "\n"), output, parser=fake,
                        on_error="skip", errors_file=errors, batch_size=3)
    assert output.getvalue().split("\n")[:-1] == [_flat(lines[0]), "", _flat(lines[2]),
                                                  _flat(lines[3])]
    assert errors.getvalue().splitlines() == ["line 2: rejected: POISON is not a word"]
    assert summary.bad == {sentences.REJECTED: 1}
    # The three shortest fail as a batch and are retried one by one; then the last batch.
    assert [len(call) for call in fake.calls] == [3, 1, 1, 1, 1]


def test_line_length_limit_is_exact_in_bytes():
    limit = 10
    data = "é" * 5 + "\r\n" + "x" * 11 + "\n" + "y" * 10 + "\n" + "z" * 25
    out, errors, _ = _run_bytes(FakeParser(), data.encode("utf-8"), on_error="skip",
                                max_line_bytes=limit)
    assert out == [_flat("é" * 5), "", _flat("y" * 10), ""]
    assert errors == ["line 2: too_long: 11 bytes, more than max_line_bytes=10",
                      "line 4: too_long: longer than max_line_bytes=10"]


class GeneratedInput(io.BufferedIOBase):
    """A binary stream of `total` generated lines that counts how many were read."""

    def __init__(self, total: int):
        super().__init__()
        self.total, self.read_lines = total, 0

    def readable(self):
        return True

    def readline(self, size=-1):
        if self.read_lines == self.total:
            return b""
        self.read_lines += 1
        return ("w " * (1 + self.read_lines % 13) + "\n").encode("ascii")


class CountingOutput(io.BufferedIOBase):
    """A binary sink that keeps only the number of lines written and the last line."""

    def __init__(self):
        super().__init__()
        self.written_lines, self.last = 0, b""

    def writable(self):
        return True

    def write(self, data):
        self.written_lines += data.count(b"\n")
        self.last = data.rsplit(b"\n", 2)[-2]
        return len(data)


def test_streaming_holds_one_chunk_whatever_the_input_length():
    total, chunk_lines = 200_000, 1000
    source, sink = GeneratedInput(total), CountingOutput()
    held = []
    fake = FakeParser(on_call=lambda: held.append(source.read_lines - sink.written_lines))
    summary = parse.run("unused", source, sink, parser=fake, chunk_lines=chunk_lines,
                        batch_size=250)
    assert summary.trees == sink.written_lines == total
    assert sink.last == _flat("w " * (1 + total % 13)).encode("ascii")
    assert max(held) == chunk_lines  # read ahead of the output: one chunk, not the input
    assert len(fake.calls) == total // 250
    # Inside a chunk, the batches go shortest first.
    lengths = [length for call in fake.calls[:chunk_lines // 250] for length in call]
    assert lengths == sorted(lengths) and lengths[0] < lengths[-1]


def test_empty_input_gives_empty_output(parser):
    assert _run(parser, "") == []


def test_missing_model_dir(tmp_path):
    with pytest.raises(ExportError, match="no SavedModel"):
        parse.run(str(tmp_path), io.StringIO("a b\n"), io.StringIO())


def test_replacing_output_keeps_the_old_file_on_failure(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    os.chmod(path, 0o640)
    link = tmp_path / "link.txt"
    link.symlink_to(path)
    with pytest.raises(RuntimeError):
        with parse.replacing_output(str(link)) as stream:
            stream.write(b"partial\n")
            raise RuntimeError("input went bad")
    assert path.read_text() == "old\n" and sorted(os.listdir(tmp_path)) == ["link.txt", "out.txt"]
    with parse.replacing_output(str(link)) as stream:
        stream.write(b"new\n")
        assert path.read_text() == "old\n"  # not yet
    assert link.is_symlink() and path.read_text() == "new\n"
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o640)
    assert sorted(os.listdir(tmp_path)) == ["link.txt", "out.txt"]


@pytest.mark.slow
def test_cli_file_to_file_skip_and_stdin_fail(export_dir, parser, tmp_path):
    input_path, output_path = tmp_path / "in.txt", tmp_path / "out.txt"
    errors_path = tmp_path / "errors.txt"
    input_path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(LINES).encode("utf-8")
                           + b"\r\n\r\ncaf\xe9\r\n")
    output_path.write_text("old\n", encoding="utf-8")
    result = _cli(f"--model_dir={export_dir}", f"--input={input_path}",
                  f"--output={output_path}", "--on_error=skip", f"--errors={errors_path}")
    assert result.returncode == 0, result.stderr[-2000:]
    written = output_path.read_text(encoding="utf-8").split("\n")[:-1]
    assert written == _run(parser, "\n".join(LINES)) + ["", ""]
    assert errors_path.read_text(encoding="utf-8").splitlines() == [
        f"line {len(LINES) + 1}: empty: no words (give one sentence per line)",
        f"line {len(LINES) + 2}: not_utf8: not UTF-8 (byte 0xE9 at byte 4)"]
    assert "sent" in result.stderr  # the progress bar
    assert result.stderr.strip().splitlines()[-1] == (
        f"parsed {len(LINES)} of {len(LINES) + 2} lines; skipped 2 (empty: 1, not_utf8: 1), "
        f"listed in {errors_path}")
    result = _cli_here(f"--model_dir={export_dir}", stdin="a\n\nb\n", parser=parser)
    assert result.returncode == 2
    assert result.stdout == _run(parser, "a\n")[0] + "\n"
    assert result.stderr.strip().splitlines() == [
        "error: line 2: empty: no words (give one sentence per line); stopped: 1 tree (lines "
        "1-1) went to stdout before it (--on_error=skip writes an empty line for a bad line "
        "and goes on)"]


def _zstd_compress(data: bytes) -> bytes:
    import zstandard  # pylint: disable=import-outside-toplevel  (apache-beam requires it)

    return zstandard.ZstdCompressor().compress(data)


COMPRESSORS = {".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress,
               ".zst": _zstd_compress}


def _compressed_lines(count: int) -> list[str]:
    return [f"w{i} is {i * 7919 % 10007} ." for i in range(count)]


def _parse_file(parser, path, **kwargs) -> tuple[list[str], list[str], parse.Summary]:
    """`parse.run` on a file opened as the CLI opens --input (decompressed by suffix)."""
    output, errors = io.BytesIO(), io.StringIO()
    with open(path, "rb") as raw, sentences.decompressed(raw, str(path)) as input_file:
        summary = parse.run("unused", input_file, output, parser=parser, errors_file=errors,
                            **kwargs)
    return (output.getvalue().decode("utf-8").split("\n")[:-1], errors.getvalue().splitlines(),
            summary)


def test_compressed_input_parses_like_plain(parser, tmp_path):
    lines = _compressed_lines(50)
    expected = _run(parser, "\n".join(lines))
    for suffix, compress in COMPRESSORS.items():
        input_path = tmp_path / f"in.txt{suffix}"
        input_path.write_bytes(compress(("\n".join(lines) + "\n").encode("utf-8")))
        assert _parse_file(parser, input_path)[0] == expected, suffix


def _truncated_file(tmp_path, suffix: str, lines: list[str]):
    data = COMPRESSORS[suffix](("\n".join(lines) + "\n").encode("utf-8"))
    input_path = tmp_path / f"in.txt{suffix}"
    input_path.write_bytes(data[:len(data) // 2])
    return input_path


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz", ".zst"])
def test_truncated_compressed_input_is_one_damaged_line(parser, tmp_path, suffix):
    """A compressed input cut short: its readable lines parse, then one `damaged` bad line."""
    lines = _compressed_lines(3000)
    written, errors, summary = _parse_file(parser, _truncated_file(tmp_path, suffix, lines),
                                           on_error="skip")
    readable = len(written) - 1  # the lines read before the damage, then its empty line
    assert 0 <= readable < len(lines) and written[-1] == ""
    if suffix == ".gz":  # gzip streams: about half the lines come out before the cut
        assert readable > len(lines) // 4
    assert written[:-1] == (_run(parser, "\n".join(lines[:readable])) if readable else [])
    (error,) = errors
    assert error.startswith(f"line {readable + 1}: damaged: the file is damaged from here on")
    assert error.endswith(f"; {readable} lines were read before it")
    assert str(summary) == f"parsed {readable} of {readable + 1} lines; skipped 1 (damaged: 1)"


@pytest.mark.slow
def test_cli_reads_a_truncated_gz(export_dir, parser, tmp_path):
    """The CLI on a cut-short .gz: --on_error=skip finishes with the readable lines and one
    damaged line; 'fail' exits 2 naming that line, and writes no output file."""
    lines = _compressed_lines(600)
    input_path = _truncated_file(tmp_path, ".gz", lines)
    expected, _, _ = _parse_file(parser, input_path, on_error="skip")
    readable = len(expected) - 1
    output_path, errors_path = tmp_path / "out.txt", tmp_path / "errors.txt"
    result = _cli_here(f"--model_dir={export_dir}", f"--input={input_path}",
                       f"--output={output_path}", "--on_error=skip", f"--errors={errors_path}",
                       parser=parser)
    assert result.returncode == 0, result.stderr[-2000:]
    assert output_path.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert result.stderr.strip().splitlines()[-1] == (
        f"parsed {readable} of {readable + 1} lines; skipped 1 (damaged: 1), listed in "
        f"{errors_path}")
    os.unlink(output_path)
    result = _cli_here(f"--model_dir={export_dir}", f"--input={input_path}",
                       f"--output={output_path}", parser=parser)
    assert result.returncode == 2
    (message,) = result.stderr.strip().splitlines()[-1:]
    assert message.startswith(f"error: line {readable + 1}: damaged: the file is damaged")
    assert f"stopped: {output_path} was not created" in message
    assert not output_path.exists() and "Traceback" not in result.stderr


def test_a_failing_model_stops_the_run():
    from tetra_tf.parser import ModelError  # pylint: disable=import-outside-toplevel

    class FailingParser(FakeParser):
        def _call(self, joined):
            self.calls.append(len(joined))
            raise ModelError("the model failed: RuntimeError: the device is gone")

    fake = FailingParser()
    output, errors = io.StringIO(), io.StringIO()
    with pytest.raises(ModelError):
        parse.run("unused", io.StringIO("a b\nc\nd e f\n"), output, parser=fake,
                  on_error="skip", errors_file=errors, batch_size=2)
    assert fake.calls == [2]  # no retries, no dead letters
    assert output.getvalue() == errors.getvalue() == ""


# The CLI tests below fail before any sentence needs the model, so they do not load it.
def test_cli_bad_bytes_name_the_line_on_stdin_and_in_files(export_dir, tmp_path):
    expected = ("error: line 1: not_utf8: not UTF-8 (byte 0xE9 at byte 4); stopped: "
                "no tree went to stdout")
    result = _cli(f"--model_dir={export_dir}", stdin=b"caf\xe9\nok\n")
    assert result.returncode == 2 and result.stderr.startswith(expected), result.stderr
    input_path = tmp_path / "in.txt"
    input_path.write_bytes(b"\xef\xbb\xbfcaf\xe9\nok\n")
    result = _cli(f"--model_dir={export_dir}", f"--input={input_path}")
    assert result.returncode == 2 and expected in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_cli_failure_leaves_an_existing_output_untouched(export_dir, tmp_path):
    output_path = tmp_path / "out.txt"
    output_path.write_text("old trees\n", encoding="utf-8")
    result = _cli(f"--model_dir={export_dir}", f"--output={output_path}", stdin="\nok\n")
    assert result.returncode == 2
    assert f"line 1: empty: no words (give one sentence per line); stopped: {output_path} " \
           "was left unchanged" in result.stderr
    assert output_path.read_text(encoding="utf-8") == "old trees\n"
    assert os.listdir(tmp_path) == ["out.txt"]  # no temporary file left behind


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_cli_write_errors_are_one_line_exit_1(export_dir):
    env = subprocess_env()
    command = [sys.executable, "-m", "tetra_tf.parse", f"--model_dir={export_dir}",
               "--on_error=skip"]
    with open("/dev/full", "wb") as full:
        for extra, stdout, name in ((["--output=/dev/full"], subprocess.PIPE, "/dev/full"),
                                    ([], full, "stdout")):
            result = subprocess.run(command + extra, input=b"\n\n", stdout=stdout,
                                    stderr=subprocess.PIPE, env=env, timeout=300, check=False)
            assert result.returncode == 1, result.stderr
            assert result.stderr.decode().splitlines() == [
                f"error: cannot write {name} (No space left on device)"]


def test_cli_usage_errors(tmp_path):
    result = _cli(f"--model_dir={tmp_path}", f"--input={tmp_path / 'missing.txt'}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in result.stderr
    result = _cli("--help")
    assert result.returncode == 0 and "Exit codes" in result.stdout
    for documented in ("--on_error=skip", "--errors", "byte order mark", "CRLF", "UTF-8"):
        assert documented in result.stdout
    result = _cli("--batch_size=x")
    assert result.returncode == 2 and result.stderr.startswith("error: flag --batch_size")
    result = _cli(f"--model_dir={tmp_path}", f"--errors={tmp_path / 'e.txt'}")
    assert result.returncode == 2 and "--errors needs --on_error=skip" in result.stderr
    result = _cli(f"--model_dir={tmp_path}", "--on_error=maybe")
    assert result.returncode == 2 and result.stderr.startswith("error: flag --on_error")


def test_cli_checks_the_bulk_programs_common_options(tmp_path):
    """The checks of tetra_tf/integrations/bulk_options.py, which Beam and Spark share."""
    for args, message in ((["--max_words=-1"], "--max_words must be 0 or more"),
                          (["--batch_size=0"], "--batch_size must be positive"),
                          ([], f"--model_dir: {tmp_path} holds no SavedModel")):
        result = _cli(f"--model_dir={tmp_path}", *args)
        assert result.returncode == 2
        assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert (inspect.signature(parse.run).parameters["batch_size"].default
            == inspect.signature(Parser.parse_sents).parameters["batch_size"].default
            == bulk_options.OPTIONS["batch_size"].default == export_format.DEFAULT_BATCH_SIZE)


@pytest.mark.slow
def test_eval_export_scores_with_gold_or_predicted_pos(export_dir, parser, loaded_once,
                                                       tmp_path):
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import eval_export  # pylint: disable=import-outside-toplevel

    gold_path = tmp_path / "gold.txt"
    gold_path.write_text("\n".join(tiny_model.TREES) + "\n\n", encoding="utf-8")
    gold_lines, gold_trees = eval_export.read_gold(str(gold_path))
    assert len(gold_lines) == len(tiny_model.TREES)
    result, pos_accuracy, lines = eval_export.score_export(export_dir, gold_trees)
    assert result.tagging_accuracy == 100.0  # gold POS on the leaves
    # What is scored: the parser's trees with the gold POS on their leaves.
    expected = [evalb.tree_to_line(with_pos_tags(tree, [pos for _, pos in gold.pos()]))
                for tree, gold in zip(parser.parse_sents([t.leaves() for t in gold_trees]),
                                      gold_trees)]
    assert lines == expected
    assert result.fscore == evalb.evaluate_lines(gold_lines, expected).fscore
    predicted, same_accuracy, _ = eval_export.score_export(
        export_dir, gold_trees, gold_pos=False)
    assert same_accuracy == pos_accuracy
    # (EVALB drops words whose predicted tag is punctuation, so a random model's predicted
    # POS can make length-mismatch errors; gold POS never do.)
    assert predicted.counts.sentences == len(gold_lines) and result.counts.error_sentences == 0
    gold_path.write_text("(TOP (S (NN a)\n", encoding="utf-8")
    with pytest.raises(ValueError, match="gold.txt:1: not a tree"):
        eval_export.read_gold(str(gold_path))


JSON_LINES = ["The cat sat on the mat .", "", "-LRB- 1\\/2 -RRB- ``quoted''",
              "a b c d e f g h", "<script>alert(1)</script> <b> &amp;"]


@pytest.mark.parametrize("flags, options", [
    ((), {}),
    (("--marginals",), {"marginals": True}),
    (("--span_marginals=0.01",), {"span_marginals": 0.01}),
    (("--k_best",), {"k_best": True}),
])
def test_cli_json_reads_back_as_parse_each(export_dir, parser, flags, options):
    """Each JSON line read back: the same words, tags, tree, score, constituents, spans,
    probabilities and k best trees as Parser.parse_each on that line; a refused line's
    object carries the reason and the error the text output reports."""
    text = "\n".join(JSON_LINES) + "\n"
    result = _cli_here(f"--model_dir={export_dir}", "--output_format=json", "--max_words=7",
                       "--on_error=skip", *flags, stdin=text, parser=parser)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [record["line"] for record in records] == list(range(1, len(JSON_LINES) + 1))
    limits = parser.sentence_limits.lowered(7)
    expected = parser.parse_each([line.split() for line in JSON_LINES], limits=limits,
                                 **options)
    errors = result.stderr.splitlines()
    for number, (record, want) in enumerate(zip(records, expected), start=1):
        if isinstance(want, sentences.SentenceError):
            # The reason parse_each gives; the error the command reports for the line.
            assert set(record) == {"line", "reason", "error"}
            assert record["reason"] == want.reason
            assert record["error"].startswith(f"{want.reason}: ")
            assert f"line {number}: {record['error']}" in errors
            continue
        assert record["words"] == JSON_LINES[number - 1].split()
        assert record["pos_tags"] == want.pos_tags and record["tree"] == want.bracketed
        assert record["score"] == want.score
        assert record == {"line": number, **want.to_dict()}
        if "marginals" in options or "span_marginals" in options:
            assert record["tree_probability"] == want.tree_probability
            assert [(c["label"], c["start"], c["end"], c["probability"])
                    for c in record["constituents"]] == [
                (c.label, c.start, c.end, c.probability) for c in want.constituents]
            assert record["constituent_marginals"] == list(want.constituent_marginals)
        else:
            assert "constituents" not in record
        if "span_marginals" in options:
            assert [Constituent(**span) for span in record["span_marginals"]] == list(
                want.span_marginals)
        if "k_best" in options:
            assert [(k["tree"], k["score"]) for k in record["k_best"]] == list(want.k_best)
            assert record["k_best"][0]["tree"] == record["tree"]
    # The same reasons as the text output's.
    plain = _cli_here(f"--model_dir={export_dir}", "--max_words=7", "--on_error=skip",
                      stdin=text, parser=parser)
    assert [line for line in plain.stderr.splitlines() if line.startswith("line ")] == [
        line for line in errors if line.startswith("line ")]


def test_cli_json_documents_read_back_as_parse_text(export_dir, parser):
    """With --documents: an object per sentence with its numbers, offsets, words and
    parse, as Parser.parse_text gives them (TextSentence.to_dict); typed markup stays
    text."""
    lines = ["It rained (a lot). We left &amp; ran <b>home</b>.", "",
             "One two three four five six seven eight nine ten eleven twelve thirteen "
             "fourteen fifteen sixteen. Short one."]
    result = _cli_here(f"--model_dir={export_dir}", "--output_format=json", "--documents",
                       "--marginals", "--max_words=15", "--on_error=skip",
                       stdin="\n".join(lines) + "\n", parser=parser)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    # One call on every line, as the command makes it (batches change the last bits).
    parsed = parser.parse_texts(lines, limits=parser.sentence_limits.lowered(15),
                                marginals=True)
    expected = [(number, index, sentence)
                for number, document in enumerate(parsed, start=1)
                for index, sentence in enumerate(document, start=1)]
    assert len(records) == len(expected) == 4
    for record, (number, index, sentence) in zip(records, expected):
        assert record == {"line": number, "sentence_number": index, **sentence.to_dict()}
        line = lines[number - 1]
        assert line[record["start"]:record["end"]].strip()
        assert [line[start:end] for start, end in zip(record["word_starts"],
                                                       record["word_ends"])] == list(
            sentence.written)
    refused = [record for record in records if "reason" in record]
    assert [(r["line"], r["sentence_number"], r["reason"]) for r in refused] == [
        (3, 1, "too_many_words")]
    assert "tree" not in refused[0] and refused[0]["words"][0] == "One"
    assert {"&", "amp", ";", "<", "b", ">"} <= set(records[1]["words"])


def test_cli_svg_draws_one_file_per_sentence(export_dir, parser, tmp_path):
    """--output_format=svg: a drawing per parsed sentence, named by line and sentence; the
    documents' drawings show the words as written; nothing on stdout."""
    folder = tmp_path / "drawings"
    result = _cli_here(f"--model_dir={export_dir}", "--output_format=svg", "--marginals",
                       f"--output={folder}", "--on_error=skip",
                       stdin="The cat sat .\n\n-LRB- x -RRB-\n", parser=parser)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert sorted(os.listdir(folder)) == ["line-1.svg", "line-3.svg"]
    drawing_3 = (folder / "line-3.svg").read_text(encoding="utf-8")
    assert drawing_3.startswith("<?xml") and ">-LRB-</text>" in drawing_3
    documents = tmp_path / "documents"
    result = _cli_here(f"--model_dir={export_dir}", "--output_format=svg", "--documents",
                       f"--output={documents}", stdin="He left (early).\n",
                       parser=parser)
    assert result.returncode == 0, result.stderr
    names = sorted(os.listdir(documents))
    assert names == ["line-1-sentence-1.svg"]
    drawn = ElementTree.parse(documents / names[0]).getroot()
    words = [element.text for element in drawn.iter("{http://www.w3.org/2000/svg}text")
             if element.get("class") == "word"]
    assert words == ["He", "left", "(", "early", ")", "."]
    result = _cli_here(f"--model_dir={export_dir}", "--output_format=svg", "--documents",
                       f"--output={documents}", stdin="\n<b>Then</b> &amp;\n", parser=parser)
    drawn = ElementTree.parse(documents / "line-2-sentence-1.svg").getroot()
    assert [element.text for element in drawn.iter("{http://www.w3.org/2000/svg}text")
            if element.get("class") == "word"] == ["<", "b", ">", "Then", "<", "/b", ">",
                                                  "&", "amp", ";"]
    assert drawn.find(".//b") is None


@pytest.mark.parametrize("flags, message", [
    (("--output_format=xml",), "--output_format"),
    (("--k_best",), "--k_best needs --output_format=json"),
    (("--output_format=json", "--k_best", "--marginals"), "--k_best cannot be combined"),
])
def test_cli_output_format_usage_errors(tmp_path, flags, message):
    result = _cli_here(f"--model_dir={tmp_path}", *flags, stdin="a b\n")
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.splitlines()) <= 2
