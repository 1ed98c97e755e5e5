"""Tests for tetra_tf/integrations/beam.py and tetra_tf/beam_parse.py: the Apache Beam parsing pipeline.

One pipeline run (module-scoped) over several files, a .gz, a truncated .gz, bad lines and
a model that refuses one sentence serves most assertions; Beam's start-up is slow. Runs
locally with FnApiRunner.
"""

import bz2
import glob
import gzip
import json
import lzma
import os
import tracemalloc
import zlib

import pytest

pytest.importorskip("apache_beam")

import apache_beam  # noqa: E402
import nltk  # noqa: E402
from apache_beam.io import fileio  # noqa: E402
from apache_beam.io.filesystem import FileMetadata  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

import tensorflow as tf  # noqa: E402

from tetra_tf import beam_parse, cli, parse  # noqa: E402
from tetra_tf.contract import sentences
from tetra_tf.contract.sentences import SentenceError, escape_leaf  # noqa: E402
from tetra_tf.integrations import beam
from tetra_tf.parser import Parser  # noqa: E402
from conftest import assert_spans_are_the_parsers, parse_with_copies_of, run_cli  # noqa: E402

MAX_WORDS = 12
MAX_LINE_BYTES = 100
LONG_LINE = b"long " * 20_000  # over MAX_LINE_BYTES
TRIGGER = "KABOOM"  # the refusing handler's model refuses any call holding this word
FLOOR = 0.05  # span_marginals' floor in the tests that ask for every labelled span
CUT_LINES = [f"w{i} is {i * 7919 % 10007} ." for i in range(400)]
_CUT_WHOLE = gzip.compress(("\n".join(CUT_LINES) + "\n").encode(), mtime=0)
CUT_GZ = _CUT_WHOLE[:len(_CUT_WHOLE) // 2]  # a .gz cut short halfway
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
    "sub/cut.txt.gz": CUT_GZ,
    "empty.txt": b"",  # no lines: an empty ordered file
}


def _readable_cut_lines() -> int:
    """The whole lines a reader gets from CUT_GZ before it ends (independently of Python's
    gzip module)."""
    data = zlib.decompressobj(wbits=31).decompress(CUT_GZ)
    return data.count(b"\n")


CUT_READABLE = _readable_cut_lines()
EXPECTED_REJECTED = {
    ("mixed.txt", 2): sentences.EMPTY, ("mixed.txt", 3): sentences.EMPTY,
    ("mixed.txt", 4): sentences.NOT_UTF8, ("mixed.txt", 5): sentences.TOO_MANY_WORDS,
    ("mixed.txt", 6): sentences.REJECTED, ("mixed.txt", 8): sentences.TOO_LONG,
    ("sub/zipped.txt.gz", 2): sentences.TOO_LONG, ("sub/zipped.txt.gz", 3): sentences.EMPTY,
    ("sub/cut.txt.gz", CUT_READABLE + 1): sentences.DAMAGED,
}


def _input_lines(corpus: str) -> dict[tuple[str, int], bytes | None]:
    """(file name, line number) → raw line, read independently of the pipeline (None: the
    truncated file's damaged line)."""
    lines = {}
    for name, data in INPUTS.items():
        if data is CUT_GZ:
            for number, line in enumerate(CUT_LINES[:CUT_READABLE], start=1):
                lines[(name, number)] = line.encode()
            lines[(name, CUT_READABLE + 1)] = None
            continue
        data = gzip.decompress(data) if name.endswith(".gz") else data
        for number, raw in enumerate(data.split(b"\n"), start=1):
            if number == len(data.split(b"\n")) and raw == b"":
                break
            lines[(name, number)] = raw.rstrip(b"\r")
    return lines


class RefusingParser(Parser):
    """A Parser whose graph refuses any call holding TRIGGER (InvalidArgumentError, as its
    checks do): Parser.parse_each parses that batch again alone, so only TRIGGER's
    sentence is refused."""

    def _call(self, joined):
        if any(TRIGGER in sentence.split(" ") for sentence in joined):
            raise tf.errors.InvalidArgumentError(None, None, f"{TRIGGER} refused")
        return super()._call(joined)


class RefusingHandler(beam.ParseModelHandler):
    """A handler whose model refuses any call holding TRIGGER."""

    def load_model(self):
        return RefusingParser(self._model_dir)


class BrokenHandler(beam.ParseModelHandler):
    """A handler whose model fails on every call (the model itself, not a sentence)."""

    def load_model(self):
        parser = Parser(self._model_dir)

        def failing(**inputs):
            raise RuntimeError("the device is gone")

        parser._serve = failing  # pylint: disable=protected-access
        return parser


@pytest.fixture(scope="module")
def export_dir(tiny_export_dir):
    return tiny_export_dir  # conftest's shared tiny export


@pytest.fixture(scope="module")
def parser(export_dir):
    return Parser(export_dir)


@pytest.fixture
def loaded_once(parser, monkeypatch):
    """In the test, a Parser made of the tiny export (the model handler's, the parse CLI's)
    is a copy of the module's: the export loaded once. The handler's own load is the
    `pipeline_run`'s and the failing models' (each its own Parser)."""
    parse_with_copies_of(parser, monkeypatch)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    for name, data in INPUTS.items():
        os.makedirs(os.path.dirname(root / name), exist_ok=True)
        (root / name).write_bytes(data)
    return str(root)


@pytest.fixture(scope="module")
def pipeline_run(export_dir, corpus, tmp_path_factory):
    """One run over all inputs with the refusing handler: (counters, records, dead letters,
    out)."""
    output = os.path.join(str(tmp_path_factory.mktemp("out")), "trees")
    options = beam.ParseOptions(
        model_dir=export_dir, inputs=[os.path.join(corpus, "*.txt"),
                                      os.path.join(corpus, "sub", "*.gz")],
        output=output, max_words=MAX_WORDS, max_line_bytes=MAX_LINE_BYTES, batch_size=4,
        ordered=True)
    totals = beam.run(options, PipelineOptions(runner="FnApiRunner"),
                      handler=RefusingHandler(export_dir, batch_size=4))
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
    assert by_key[("mixed.txt", 2)] == "empty: no words (give one sentence per line)"
    assert by_key[("mixed.txt", 4)] == "not_utf8: not UTF-8 (byte 0xFF at byte 6)"
    assert by_key[("mixed.txt", 5)] == (f"too_many_words: {MAX_WORDS + 1} words, more than "
                                        f"max_words={MAX_WORDS}")
    assert by_key[("mixed.txt", 6)] == f"rejected: {TRIGGER} refused"
    for key, error in by_key.items():
        assert error.startswith(EXPECTED_REJECTED[key] + ": ")


def test_a_truncated_gz_keeps_its_readable_lines_and_one_damaged_dead_letter(pipeline_run,
                                                                              corpus):
    _, records, errors, _ = pipeline_run
    assert len(CUT_LINES) // 4 < CUT_READABLE < len(CUT_LINES)
    parsed = sorted(r["line"] for r in records if _key(corpus, r)[0] == "sub/cut.txt.gz")
    assert parsed == list(range(1, CUT_READABLE + 1))
    (damaged,) = [e for e in errors if _key(corpus, e)[0] == "sub/cut.txt.gz"]
    assert damaged["reason"] == sentences.DAMAGED
    assert damaged["line"] == CUT_READABLE + 1
    assert damaged["error"].startswith("damaged: the file is damaged from here on")
    assert damaged["error"].endswith(f"; {CUT_READABLE} lines were read before it")


def test_an_over_long_line_is_a_dead_letter_between_parsed_neighbours(pipeline_run, corpus):
    _, records, errors, _ = pipeline_run
    parsed = {_key(corpus, r) for r in records}
    too_long = {_key(corpus, e): e["error"] for e in errors
                if e["reason"] == sentences.TOO_LONG}
    assert too_long == {key: f"too_long: longer than max_line_bytes={MAX_LINE_BYTES}"
                        for key in (("mixed.txt", 8), ("sub/zipped.txt.gz", 2))}
    assert {("mixed.txt", 7), ("mixed.txt", 9), ("sub/zipped.txt.gz", 1)} <= parsed


def test_each_tree_is_the_parsers_tree_for_its_line(pipeline_run, corpus, parser):
    _, records, _, _ = pipeline_run
    lines = _input_lines(corpus)
    lines[("mixed.txt", 1)] = lines[("mixed.txt", 1)].removeprefix(b"\xef\xbb\xbf")
    records.sort(key=lambda r: _key(corpus, r))
    # The model gets each line's words as given; only the tree's leaves are escaped.
    word_lists = [lines[_key(corpus, r)].decode().split() for r in records]
    results = parser.parse_each(word_lists)
    assert [r["tree"] for r in records] == [result.bracketed for result in results]
    for record, words, result in zip(records, word_lists, results):
        assert nltk.Tree.fromstring(record["tree"]) == result.tree
        assert result.tree.leaves() == [escape_leaf(word) for word in words]
        assert isinstance(record["score"], float) and record["score"] <= 0
        assert record["score"] == pytest.approx(result.score, abs=1e-4)


def test_a_refused_batch_loses_only_the_refused_sentence(pipeline_run, corpus):
    totals, records, _, _ = pipeline_run
    assert totals["rejected_rejected"] == 1
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
    for reason in sentences.REASONS:
        assert totals[f"rejected_{reason}"] == list(EXPECTED_REJECTED.values()).count(reason)
    assert totals["sentences_parsed"] + sum(
        totals[f"rejected_{reason}"] for reason in sentences.REASONS) == totals["lines_read"]
    assert len(errors) == len(EXPECTED_REJECTED)


def test_without_marginals_records_have_no_marginals(pipeline_run):
    _, records, errors, _ = pipeline_run
    assert {frozenset(record) for record in records} == {
        frozenset({"file", "line", "tree", "score"})}
    assert {frozenset(error) for error in errors} == {
        frozenset({"file", "line", "reason", "error"})}


def test_ordered_output_has_one_line_per_input_line(pipeline_run, corpus):
    _, records, _, output = pipeline_run
    trees = {_key(corpus, r): r["tree"] for r in records}
    for name in INPUTS:
        with open(f"{output}-ordered/{name}.trees", encoding="utf-8") as f:
            written = f.read().split("\n")
        assert written[-1] == ""
        numbers = sorted(n for file, n in _input_lines(corpus) if file == name)
        assert written[:-1] == [trees.get((name, n), "") for n in numbers]


@pytest.mark.slow
def test_cli_ordered_output_equals_parse_byte_for_byte(export_dir, corpus, tmp_path, capsys,
                                                       loaded_once):
    good = os.path.join(corpus, "good.txt")
    output = str(tmp_path / "trees")
    code = beam_parse.main([f"--model_dir={export_dir}", f"--input={good}",
                            f"--output={output}", "--ordered", "--batch_size=3"])
    printed = capsys.readouterr().out
    assert code == 0
    assert f"{len(GOOD_LINES)} of {len(GOOD_LINES)} lines parsed" in printed
    result = run_cli(parse.define_flags, parse.main, f"--model_dir={export_dir}",
                     f"--input={good}")
    assert result.returncode == 0, result.stderr
    with open(f"{output}-ordered/good.txt.trees", "rb") as f:
        assert f.read() == result.stdout.encode("utf-8")
    assert os.path.getsize(glob.glob(f"{output}-errors-*.jsonl")[0]) == 0


@pytest.mark.slow
def test_cli_finishes_with_a_truncated_gz_among_good_files(export_dir, corpus, tmp_path,
                                                         capsys, loaded_once):
    output = str(tmp_path / "trees")
    code = beam_parse.main([f"--model_dir={export_dir}",
                            f"--input={os.path.join(corpus, 'good.txt')}",
                            f"--input={os.path.join(corpus, 'sub', 'cut.txt.gz')}",
                            f"--output={output}", "--batch_size=16"])
    printed = capsys.readouterr().out
    assert code == 0
    lines = len(GOOD_LINES) + CUT_READABLE + 1
    assert f"{len(GOOD_LINES) + CUT_READABLE} of {lines} lines parsed" in printed
    records = _read_jsonl(f"{output}-[0-9]*.jsonl")
    assert sorted(_key(corpus, r) for r in records) == sorted(
        [("good.txt", n) for n in range(1, len(GOOD_LINES) + 1)]
        + [("sub/cut.txt.gz", n) for n in range(1, CUT_READABLE + 1)])
    (damaged,) = _read_jsonl(f"{output}-errors-*.jsonl")
    assert (_key(corpus, damaged), damaged["reason"]) == (
        ("sub/cut.txt.gz", CUT_READABLE + 1), sentences.DAMAGED)


def test_a_failing_model_fails_the_pipeline_instead_of_dead_lettering(export_dir, corpus,
                                                                      tmp_path):
    output = str(tmp_path / "trees")
    options = beam.ParseOptions(model_dir=export_dir,
                                inputs=[os.path.join(corpus, "good.txt")], output=output)
    with pytest.raises(Exception, match="the model failed: RuntimeError: the device is gone"):
        beam.run(options, PipelineOptions(runner="FnApiRunner"),
                 handler=BrokenHandler(export_dir, batch_size=4))
    assert not glob.glob(f"{output}-errors-*.jsonl") or all(
        os.path.getsize(path) == 0 for path in glob.glob(f"{output}-errors-*.jsonl"))


@pytest.mark.slow
def test_cli_model_failure_is_exit_1_in_one_line(export_dir, corpus, tmp_path, monkeypatch,
                                                 capsys):
    """beam_parse with a Parser whose model fails on every call (FnApiRunner runs the
    workers in this process)."""
    from tetra_tf import parser

    init = parser.Parser.__init__

    def broken_init(self, *args, **kwargs):
        init(self, *args, **kwargs)

        def failing(**inputs):
            raise RuntimeError("the device is gone")
        self._serve = failing

    monkeypatch.setattr(parser.Parser, "__init__", broken_init)
    output = str(tmp_path / "trees")
    code = cli.guarded(beam_parse.main, [  # as cli.run_argv runs it
        f"--model_dir={export_dir}", f"--input={os.path.join(corpus, 'good.txt')}",
        f"--output={output}"])
    printed = capsys.readouterr()
    assert code == 1, printed.err[-3000:]
    assert "Traceback" not in printed.err, printed.err[-3000:]
    (line,) = printed.err.strip().splitlines()
    assert line.startswith("error: the pipeline failed: ")
    assert "the model failed: RuntimeError: the device is gone" in line
    assert "lines parsed" not in printed.out


@pytest.mark.parametrize("args, message", [
    (["--input=X", "--output=Y"], "--input: X matches no file"),  # the packaged default model
    (["--model_dir=MISSING/1", "--input=X", "--output=Y"], "holds no SavedModel"),
    (["--model_dir=MISSING", "--input=X", "--output=Y"],
     "MISSING is neither an export's path nor a packaged model's name"),
    (["--model_dir=EXPORT", "--input=NOWHERE/*.txt", "--output=Y"], "matches no file"),
    (["--model_dir=EXPORT", "--input=NOWHERE", "--output=Y", "--runer=x"], "--runer=x"),
    (["--model_dir=EXPORT", "--input=NOWHERE", "--output=Y", "--batch_size=0"], "positive"),
    (["--model_dir=EXPORT", "--input=NOWHERE", "--output=Y", "--max_line_bytes=0"],
     "--max_line_bytes must be positive"),
    (["--model_dir=EXPORT", "--input=NOWHERE", "--output=Y", "--span_marginals=nan"],
     "--span_marginals is a probability from 0 to 1, got nan"),
])
def test_cli_usage_errors_are_one_line(export_dir, args, message, capsys):
    args = [a.replace("EXPORT", export_dir) for a in args]
    assert cli.guarded(beam_parse.main, args) == 2  # as cli.run_argv runs it
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def _read_sentences(path, tokenize=False, max_words=0,
                    max_line_bytes=sentences.DEFAULT_MAX_LINE_BYTES, documents=False) -> list:
    """ReadSentences' outputs for one file, without a pipeline."""
    read = beam.ReadSentences(tokenize, sentences.SentenceLimits().lowered(
        max_words, max_line_bytes), documents)
    read.setup()
    readable = fileio.ReadableFile(FileMetadata(str(path), os.path.getsize(path)))
    return list(read.process(readable))


def test_read_sentences_tokenizes_escapes_and_rejects(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b'Hi (there) "you"\r\na b c d e f g h\n')
    sentence, rejected = _read_sentences(path, tokenize=True, max_words=7)
    assert sentence == beam.Sentence(str(path), 1, "Hi -LRB- there -RRB- `` you ''", 7)
    assert rejected.tag == beam.ReadSentences.REJECTED
    assert rejected.value == beam.dead_letter(str(path), 2, SentenceError(
        sentences.TOO_MANY_WORDS, "8 words, more than max_words=7"))
    assert rejected.value == {"file": str(path), "line": 2, "reason": "too_many_words",
                              "error": "too_many_words: 8 words, more than max_words=7"}
    # Words go to the model as given (the tree's leaves are escaped by the graph).
    path.write_bytes(b"a:-) b " + b"w " * 1000)
    (sentence,) = _read_sentences(path)
    assert sentence.text.startswith("a:-) b w") and sentence.num_words == 1002


def test_read_sentences_splits_documents_into_checked_sentences(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes("It rained. We left (early).\n\n\xff\nFine. W w w w w w w .\n".encode(
        "utf-8").replace(b"\xc3\xbf", b"\xff"))
    first, second, bad_line, fine, too_long = _read_sentences(path, max_words=6,
                                                               documents=True)
    assert first == beam.Sentence(str(path), 1, "It rained .", 3, 1, 0, 11)
    assert second == beam.Sentence(str(path), 1, "We left -LRB- early -RRB- .", 6, 2, 11, 27)
    assert bad_line.value["line"] == 3 and "sentence_number" not in bad_line.value
    assert fine == beam.Sentence(str(path), 4, "Fine .", 2, 1, 0, 6)
    assert too_long.value == {"file": str(path), "line": 4, "sentence_number": 2, "start": 6,
                              "end": 21, "reason": "too_many_words",
                              "error": "too_many_words: 8 words, more than max_words=6"}


def test_documents_give_a_record_per_sentence_as_the_parse_cli_does(export_dir, parser,
                                                                    tmp_path, capsys,
                                                                    loaded_once):
    """A record per sentence, as the parse CLI gives; with --span_marginals (which implies
    --marginals), each record also has the Parser's marginals and labelled spans for its
    sentence."""
    texts = ["It rained. We left (early).", "", "He said \u201cno.\u201d Then he went."]
    path = tmp_path / "docs.txt"
    path.write_text("\n".join(texts) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "trees"
    assert cli.guarded(beam_parse.main, [f"--model_dir={export_dir}", f"--input={path}",
                                         f"--output={output}", "--documents",
                                         f"--span_marginals={FLOOR}"]) == 0
    records = sorted(_read_jsonl(f"{output}-*-of-*.jsonl"),
                     key=lambda r: (r["line"], r["sentence_number"]))
    assert not _read_jsonl(f"{output}-errors-*.jsonl")
    expected = [(number, index, s.start, s.end, s.result.bracketed)
                for number, document in enumerate(parser.parse_texts(texts), start=1)
                for index, s in enumerate(document, start=1)]
    assert [(r["line"], r["sentence_number"], r["start"], r["end"], r["tree"])
            for r in records] == \
        expected and len(expected) == 4
    marginals = [s.result for document in parser.parse_texts(texts, marginals=True)
                 for s in document]
    every = parser.parse_each([s.words for document in parser.parse_texts(texts)
                               for s in document], span_marginals=0.0)
    for record, result, spans in zip(records, marginals, every, strict=True):
        assert record["tree_probability"] == pytest.approx(result.tree_probability, abs=1e-6)
        assert record["constituent_marginals"] == pytest.approx(
            list(result.constituent_marginals), abs=1e-6)
        assert len(record["constituent_marginals"]) == len(result.constituents) > 0
        assert_spans_are_the_parsers(record["span_marginals"], spans.span_marginals, FLOOR)
    # Spans outside the trees too.
    assert sum(len(r["span_marginals"]) for r in records) > sum(
        len(result.constituents) for result in marginals)
    capsys.readouterr()
    assert cli.guarded(beam_parse.main, [f"--model_dir={export_dir}", f"--input={path}",
                                         f"--output={output}", "--documents",
                                         "--ordered"]) == 2
    assert "--ordered writes one tree per input line" in capsys.readouterr().err


def test_the_handler_gives_the_parsers_marginals_and_spans(export_dir, parser, tmp_path):
    """Without a pipeline: ParseModelHandler.run_inference with marginals, or with
    span_marginals (which implies them), gives each sentence the Parser's; a sentence over
    parse_span_marginals' bound is refused alone (too_many_words), its dead letter as any
    other; a floor outside 0..1 is refused before any work."""
    from tetra_tf.contract.export_format import MAX_MARGINALS_WORDS

    word_lists = [["The", "cat", "sat", "on", "the", "mat", "."],
                  [f"w{i}" for i in range(MAX_MARGINALS_WORDS + 1)], ["Hi", "!"]]
    batch = [beam.Sentence("in.txt", number, " ".join(words), len(words))
             for number, words in enumerate(word_lists, start=1)]
    with_marginals = parser.parse_each(word_lists, marginals=True)
    every = parser.parse_each(word_lists, span_marginals=0.0)
    split = beam.SplitResults()
    split.setup()
    for options, keys in (({"marginals": True}, {"tree_probability", "constituent_marginals"}),
                          ({"span_marginals": FLOOR}, {"tree_probability",
                                                       "constituent_marginals",
                                                       "span_marginals"})):
        handler = beam.ParseModelHandler(export_dir, **options)
        first, too_long, last = [output for result in handler.run_inference(batch, parser)
                                 for output in split.process(result)]
        assert too_long.tag == beam.SplitResults.REJECTED
        assert too_long.value["reason"] == sentences.TOO_MANY_WORDS
        assert set(too_long.value) == {"file", "line", "reason", "error"}
        for record, result, spans in ((first, with_marginals[0], every[0]),
                                      (last, with_marginals[2], every[2])):
            assert set(record) == {"file", "line", "tree", "score"} | keys
            assert record["tree"] == result.bracketed
            assert record["tree_probability"] == pytest.approx(result.tree_probability,
                                                               abs=1e-6)
            assert record["constituent_marginals"] == pytest.approx(
                list(result.constituent_marginals), abs=1e-6)
            if "span_marginals" in keys:
                assert_spans_are_the_parsers(record["span_marginals"], spans.span_marginals,
                                             FLOOR)
    for bad in (1.5, -0.1, float("nan"), True):
        with pytest.raises(ValueError, match="span_marginals is a probability from 0 to 1"):
            beam.ParseModelHandler(export_dir, span_marginals=bad)
        options = beam.ParseOptions(model_dir=export_dir, inputs=[str(tmp_path / "*.txt")],
                                    output=str(tmp_path / "out"), span_marginals=bad)
        with pytest.raises(ValueError, match="span_marginals is a probability from 0 to 1"):
            beam.build(apache_beam.Pipeline(options=PipelineOptions(runner="FnApiRunner")),
                       options,
                       handler=beam.ParseModelHandler(export_dir))
    assert not list(tmp_path.iterdir())  # nothing written


def _zstd_compress(data: bytes) -> bytes:
    import zstandard  # pylint: disable=import-outside-toplevel  (apache-beam requires it)

    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.parametrize("suffix, compress", [
    ("gz", gzip.compress), ("bz2", bz2.compress), ("zst", _zstd_compress)])
def test_read_sentences_gives_a_truncated_file_one_damaged_dead_letter(tmp_path, suffix,
                                                                        compress):
    whole = compress(("\n".join(CUT_LINES) + "\n").encode("utf-8"))
    path = tmp_path / f"cut.txt.{suffix}"
    path.write_bytes(whole[:len(whole) // 2])
    outputs = _read_sentences(path)
    readable = len(outputs) - 1
    assert 0 <= readable < len(CUT_LINES)
    assert [o.text for o in outputs[:-1]] == CUT_LINES[:readable]
    assert outputs[-1].tag == beam.ReadSentences.REJECTED
    assert outputs[-1].value["reason"] == sentences.DAMAGED
    assert outputs[-1].value["line"] == readable + 1
    if suffix == "gz":
        assert readable == CUT_READABLE


@pytest.mark.parametrize("suffix, compress", [
    ("txt", lambda data: data), ("txt.gz", gzip.compress), ("txt.bz2", bz2.compress),
    ("txt.xz", lambda data: lzma.compress(data, preset=1))])
@pytest.mark.slow
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
            for o in outputs] == ["before", sentences.TOO_LONG, "after"]
    assert peak < 2 * 1024 * 1024, peak  # the line is 32 MiB
