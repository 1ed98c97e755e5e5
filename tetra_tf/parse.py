r"""Parses sentences, one per line, with an exported SavedModel; writes one tree per line.

  python -m tetra_tf.parse [--model_dir=NAME|EXPORT] [--input=FILE] [--output=FILE]
      [--tokenize | --documents] [--batch_size=64] [--on_error=fail|skip] [--errors=FILE]
      [--max_words=N] [--max_line_bytes=N] [--scores] [--marginals] [--span_marginals=P]
      [--output_format=text|json|svg] [--k_best]
  python -m tetra_tf.parse [--model_dir=NAME|EXPORT] --describe

The model: the one packaged with tetra-tf by default (tetra_tf.packaged_models), another
packaged model by its name, or your own export's directory (tetra_tf.export's --export_dir).

Input (stdin by default, or --input=FILE; FILE.gz, .bz2, .xz and .lzma are decompressed):
one sentence per line, pre-tokenized Penn Treebank tokens separated by whitespace (-LRB-,
``, 1\/2 ... as in the treebank; whitespace is what Python's str.split splits on, Unicode
spaces included: see tetra_tf/contract/sentences.py, which every way into the parser shares); with
--tokenize, one sentence of raw text per line, split into PTB tokens by tetra_tf/contract/text.py
(NLTK's Treebank rules: brackets become -LRB- etc., double quotes `` and '', n't split
off), as the SavedModel's parse_text signature splits it. Output (stdout by default): one
bracketed tree per input line, in order, ``(TOP (S ...))`` with the predicted POS tags,
ready for EVALB. A bracket inside a leaf, such as in ``:-)``, is written as its PTB escape
(-LRB-, -RRB-, -LSB-, -RSB-, -LCB-, -RCB-) so that every output line stays a readable tree. With --scores each line is the tree's score (the
log-probability of its tags, ≤ 0), a tab, then the tree. With --marginals it is the tree's
probability among all valid trees (that of its tag sequence), a tab, each constituent's probability (space-separated,
in the order the tree opens their brackets, the root's and the parts of speech' left out),
a tab, then the tree (after the score, with both). --span_marginals=P (a probability from
0 to 1) writes the --marginals columns, then one more before the tree: every labelled span,
in the tree or not, whose probability is at least P, space-separated, each written
START:END:LABEL:PROBABILITY (its first and last word, 0-based; by first word, then last
word, then label; empty when no span reaches P); a sentence of more than 256 words is
then refused (too_many_words). --describe prints the export's model card (encoder,
training data, dev/test F1) instead of parsing.

Documents (--documents): each input line is a document of raw text (a paragraph, or a
text of up to --max_line_bytes on one line), split into sentences and PTB tokens by
tetra_tf/contract/text.py.
Each sentence gets one output line: the input line's number, the sentence's number in
it (from 1), its start and end character offsets in the line, and its tree (with
--scores, --marginals or --span_marginals, their columns, then the tree), tab-separated;
a blank line has no sentences and writes nothing. A refused sentence is a bad line as
below, named "line N: sentence M"; with --on_error=skip its output line has an empty
tree, and a refused line (not_utf8, too_long) writes nothing (both are reported).

Formats (--output_format): text, the lines above; json, one JSON object per output line
instead (`json_record`, field names from tetra_tf/contract/parse_record.py, the same as Beam's
records and Spark's columns): ``line`` (and with --documents ``sentence_number``,
``start``, ``end``, ``word_starts``, ``word_ends``), ``words``, ``pos_tags``, ``tree``,
``score``; with --marginals ``tree_probability``, ``constituent_marginals`` and
``constituents`` ([{label, start, end, probability}]); with --span_marginals
``span_marginals``; with --k_best ``k_best`` ([{tree, score}], best first); a refused line
or sentence (with --on_error=skip) gets an object with ``reason`` and ``error`` instead of
an empty line. svg: each tree drawn by tetra_tf/trees/drawing.py into its own file in the folder
--output names (made if missing), line-N.svg, or line-N-sentence-M.svg with --documents
(whose drawings show the words as written); with --marginals each constituent shows its
probability; nothing goes to stdout.

Streaming: lines are read, parsed and written in chunks (at most 4096 lines or 8 MiB of
text; sorted by length inside a chunk so that batches pad little), so memory does not
grow with the input; stdout receives each chunk's trees as soon as they are parsed.
--output=FILE is written to a temporary file next to FILE and renamed onto it at the end:
an existing FILE is replaced only by a complete output (never truncated by a failed run).

Encodings and line ends: input is UTF-8 bytes; only \n ends a line (line N is the N-th
\n-terminated line; the last line needs no \n); a \r before the \n (CRLF) is dropped, and
any other \r is whitespace; a UTF-8 byte order mark at the very start of the input is
dropped. Output is UTF-8 with \n line ends, whatever the locale.

Bad lines, each with a reason code (the same codes in every way in: tetra_tf/contract/sentences.py):
an empty or whitespace-only line (empty), a line that is not valid UTF-8 (not_utf8), a
line longer than --max_line_bytes (too_long), a sentence of more than --max_words words
after --tokenize (too_many_words), a sentence of more subword pieces than the model takes
in one call (too_many_pieces), and where a compressed input turns out cut short or corrupt
(damaged: the lines before it are parsed, nothing after it is read). --on_error=fail (the default; EVALB-safe) stops at the first
one with exit code 2, naming its line and saying how many trees were written before it
(stdout) or that FILE was left unchanged (--output). --on_error=skip writes an empty
line in its place, so that output line N still belongs to input line N, reports each
bad line as "line N: REASON: DETAIL" to --errors=FILE (default: stderr), prints a count,
and exits 0. A failure of the model itself is no bad line: the run stops with exit code 1.

Exit codes:
  0  parsed every line (with --on_error=skip: every line that was not bad)
  1  internal failure (the model itself failed), or the output could not be written
     (e.g. a full disk)
  2  usage or input error: bad flags, a missing or unreadable model directory or input
     file, an unwritable output file, or (with --on_error=fail) a bad input line (the
     message names it)
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import io
import json
import os
import stat
import sys
import tempfile
from typing import IO, Any, Iterator, Sequence, TextIO

from absl import flags
from tqdm import tqdm

from tetra_tf import cli, packaged_models
from tetra_tf.contract import export_format, parse_record, sentences
from tetra_tf.contract import text as text_lib
from tetra_tf.errors import InputError
from tetra_tf.integrations import bulk_options

# --output_format: bracketed trees in columns, JSON objects, or SVG drawings.
TEXT, JSON, SVG = "text", "json", "svg"
OUTPUT_FORMATS = (TEXT, JSON, SVG)

# A chunk is read, parsed and written before the next is read: this bounds memory.
CHUNK_LINES = 4096
CHUNK_BYTES = 8 * 1024 * 1024


class BadLineError(InputError):
    """With --on_error=fail: the first bad input line (with --documents, the sentence of
    it), after `trees_written` trees."""

    def __init__(self, number: int, error: sentences.SentenceError, trees_written: int,
                 sentence: int | None = None):
        where = f"line {number}" + (f": sentence {sentence}" if sentence is not None else "")
        super().__init__(f"{where}: {error}")
        self.number, self.error, self.trees_written = number, error, trees_written


class OutputError(Exception):
    """The output (or errors file) could not be written: one line, exit code 1."""


@dataclasses.dataclass
class Summary:
    """What a run did: lines read, trees written, bad lines (or, with documents, bad lines
    and sentences) by reason."""
    lines: int = 0
    trees: int = 0
    bad: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    documents: bool = False

    def __str__(self) -> str:
        skipped = sum(self.bad.values())
        if self.documents:
            text = (f"parsed {self.trees} sentences in {self.lines} lines; skipped {skipped}"
                    " (lines or sentences)")
        else:
            text = f"parsed {self.trees} of {self.lines} lines; skipped {skipped}"
        if skipped:
            text += " (" + ", ".join(f"{kind}: {n}" for kind, n in sorted(self.bad.items())) + ")"
        return text


def chunks(lines: Iterator[sentences.Line], max_lines: int = CHUNK_LINES,
           max_bytes: int = CHUNK_BYTES) -> Iterator[list[sentences.Line]]:
    """Groups lines into chunks of at most max_lines lines and about max_bytes of words."""
    chunk: list[sentences.Line] = []
    size = 0
    for line in lines:
        chunk.append(line)
        size += (_length(line.words) if line.words else
                 len(line.text) + 1 if line.text is not None else 1)
        if len(chunk) >= max_lines or size >= max_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _length(words: Sequence[str]) -> int:
    """The length of the words joined by spaces, plus one: a chunk's size in characters."""
    return sum(map(len, words)) + len(words)


def format_sentence(number: int, index: int, sentence, text: str) -> str:
    """One --documents output line (without newline), tab-separated: the input line's
    number, the sentence's number in it (from 1), the sentence's start and end (character
    offsets in the line), then `text` (its tree, score and tree, or "" if refused).

    Args:
      number: the input line's number.
      index: the sentence's number in the line.
      sentence: the `TextSentence` (its start and end).
      text: what follows the offsets.
    """
    return f"{number}\t{index}\t{sentence.start}\t{sentence.end}\t{text}"


def format_result(result, scores: bool = False, marginals: bool = False,
                  span_marginals: bool = False) -> str:
    """One output line (without newline): the tree, after its score (--scores), its
    marginals (--marginals: the tree's probability, a tab, each constituent's, space-
    separated) and its spans (--span_marginals: the marginals, then every labelled span
    as START:END:LABEL:PROBABILITY, space-separated), tab-separated.

    Args:
      result: a `ParseResult` (parsed with marginals, or span_marginals, when they are
        asked for).
      span_marginals: write `result.span_marginals` (implies marginals).
    """
    columns = [f"{result.score:.4f}"] if scores else []
    if marginals or span_marginals:
        columns += [f"{result.tree_probability:.4f}",
                    " ".join(f"{p:.4f}" for p in result.constituent_marginals)]
    if span_marginals:
        columns.append(" ".join(f"{c.start}:{c.end}:{c.label}:{c.probability:.4f}"
                                for c in result.span_marginals))
    return "\t".join(columns + [result.bracketed])


class _Writer:
    """Writes text lines as UTF-8 to a binary or text stream; write failures → OutputError."""

    def __init__(self, stream: IO, name: str):
        self._stream, self._name = stream, name
        self._binary = not isinstance(stream, io.TextIOBase)

    def write(self, lines: Sequence[str]) -> None:
        if not lines:
            return
        text = "\n".join(lines) + "\n"
        try:
            self._stream.write(text.encode("utf-8") if self._binary else text)
            self._stream.flush()
        except OSError as e:
            raise OutputError(f"cannot write {self._name} ({e.strerror or e})") from None


def run(model_dir: str, input_file: IO, output_file: IO, tokenize: bool = False,
        batch_size: int = export_format.DEFAULT_BATCH_SIZE, progress: bool = False,
        parser=None, on_error: str = "fail", errors_file: TextIO | None = None,
        max_words: int = 0, max_line_bytes: int = sentences.DEFAULT_MAX_LINE_BYTES,
        chunk_lines: int = CHUNK_LINES, output_name: str = "the output",
        errors_name: str = "--errors", scores: bool = False,
        documents: bool = False, marginals: bool = False,
        span_marginals: float | None = None, output_format: str = TEXT,
        k_best: bool = False, svg_dir: str | None = None) -> Summary:
    """Parses every line of input_file into output_file, chunk by chunk; returns a Summary.

    Args:
      input_file: a binary (UTF-8 bytes) or text stream, read line by line
        (`sentences.read_lines`).
      output_file: a binary or text stream; gets one line per input line (with
        on_error="skip", an empty one for each bad line).
      parser: an already loaded `Parser` of model_dir (or an object with its
        `parse_each` and `sentence_limits`), to reuse; otherwise loaded when the first
        line needs it.
      on_error: "fail" stops at the first bad line; "skip" writes an empty line for it
        and reports "line N: REASON: DETAIL" to errors_file (default: stderr).
      max_words, max_line_bytes: this run's own limits (they only lower the export's).
      scores: write each tree's score before it (`format_result`).
      marginals: write the tree's and each constituent's probability before the tree
        (`format_result`).
      span_marginals: a probability from 0 to 1: also write every labelled span of at
        least that probability, after the marginals (`format_result`; implies marginals).
      documents: each line is a document of raw text (`Parser.parse_texts`): one output
        line per sentence (`format_sentence`: line and sentence numbers, offsets, tree),
        none for a blank line; a refused sentence's tree is empty (with "skip"), a refused
        line writes nothing; both are reported to errors_file.
      output_format: TEXT (the lines above), JSON (one `parse_record` object per
        sentence: `json_record`; with "skip", a refused line or sentence gets an object with
        its reason and error instead of an empty line) or SVG (each parsed sentence drawn
        into its own file in svg_dir, `svg_name`; nothing written to output_file).
      k_best: with JSON, also each sentence's best trees and their scores (``k_best``).
      svg_dir: with SVG, the folder the drawings go to (made if missing).

    Raises:
      BadLineError: with on_error="fail", for the first bad line (after writing the
        trees of the lines before it).
      InputError: for a bad option (span_marginals outside 0..1 among them, checked
        before the model loads) or an unreadable input.
      ExportError: for a model directory that holds no usable export.
      OutputError: if output_file or errors_file cannot be written.
      parser.ModelError: if the model itself fails.
    """
    choices = bulk_options.ON_ERROR_CHOICES
    if on_error not in choices:
        raise InputError(f"--on_error must be one of {', '.join(choices)}, got {on_error!r}")
    _check_span_marginals(span_marginals)
    _check_output_format(output_format, k_best, svg_dir,
                         marginals or span_marginals is not None)
    # Checked before TensorFlow loads (seconds) for a local path.
    if parser is None:
        model_dir = packaged_models.resolve(model_dir)
        export_format.check(model_dir)
    own_limits = sentences.SentenceLimits().lowered(max_words, max_line_bytes)
    output = _Writer(output_file, output_name)
    errors = _Writer(errors_file or sys.stderr, errors_name)
    summary = Summary(documents=documents)
    bar = tqdm(unit="sent", disable=not progress, file=sys.stderr)
    try:
        lines = sentences.read_lines(input_file, own_limits, text_lib.word_splitter(tokenize),
                                     documents)
        for chunk in chunks(lines, chunk_lines):
            summary.lines += len(chunk)
            if on_error == "fail":
                first_bad = next((i for i, line in enumerate(chunk) if line.error), None)
                chunk = chunk if first_bad is None else chunk[:first_bad + 1]
            good = [line for line in chunk if line.error is None]
            if good and parser is None:
                parser = load_parser(model_dir)
            limits = parser.sentence_limits.lowered(max_words) if good else own_limits
            if not good:
                parsed = iter([])
            elif documents:
                parsed = iter(parser.parse_texts([line.text for line in good],
                                                 batch_size=batch_size, limits=limits,
                                                 progress=bar.update, marginals=marginals,
                                                 span_marginals=span_marginals,
                                                 k_best=k_best))
            else:
                parsed = iter(parser.parse_each([line.words for line in good], batch_size,
                                                limits, bar.update, marginals=marginals,
                                                span_marginals=span_marginals,
                                                k_best=k_best))
            out_lines, error_lines, trees = [], [], 0
            for line in chunk:
                for index, sentence, result in _line_results(line, parsed, documents):
                    refused = isinstance(result, sentences.SentenceError)
                    if refused:
                        if on_error == "fail":
                            output.write(out_lines)
                            raise BadLineError(line.number, result, summary.trees + trees,
                                               sentence=index)
                        summary.bad[result.reason] += 1
                        where = f"line {line.number}: " + (f"sentence {index}: " if index else "")
                        error_lines.append(f"{where}{result}")
                    else:
                        trees += 1
                    if output_format == JSON:
                        out_lines.append(json.dumps(json_record(line.number, index, sentence,
                                                                result), ensure_ascii=False))
                    elif output_format == SVG:
                        if not refused:
                            _write_svg(svg_dir, svg_name(line.number, index), result,
                                       sentence)
                    elif refused:
                        if not documents or sentence is not None:
                            out_lines.append(_prefix(line.number, index, sentence))
                    else:
                        out_lines.append(_prefix(line.number, index, sentence) + format_result(
                            result, scores, marginals, span_marginals is not None))
            output.write(out_lines)
            summary.trees += trees
            errors.write(error_lines)
    except sentences.ReadError as e:
        raise InputError(str(e)) from None
    finally:
        bar.close()
    return summary


def _check_span_marginals(span_marginals: float | None) -> None:
    """InputError unless span_marginals is None or a probability from 0 to 1."""
    if span_marginals is not None:
        try:
            export_format.check_span_floor(span_marginals, "--span_marginals")
        except ValueError as e:
            raise InputError(str(e)) from None


def _line_results(line: sentences.Line, parsed: Iterator, documents: bool
                  ) -> Iterator[tuple[int | None, Any, Any]]:
    """A line's results as (sentence number or None, its `TextSentence` or None, result):
    one for a line that is a sentence or a refused line, one per sentence of a
    document."""
    if line.error is not None:
        yield None, None, line.error
    elif not documents:
        yield None, None, next(parsed)
    else:
        for index, sentence in enumerate(next(parsed), start=1):
            yield index, sentence, sentence.result


def _prefix(number: int, index: int | None, sentence) -> str:
    """What a text output line starts with: a document sentence's `format_sentence`
    columns, else nothing."""
    return "" if sentence is None else format_sentence(number, index, sentence, "")


def json_record(number: int, index: int | None, sentence, result) -> dict[str, Any]:
    """One --output_format=json object: the line's number, and with documents the
    sentence's number, then the sentence's fields (`TextSentence.to_dict`) or the
    result's (`ParseResult.to_dict`, or a refusal's reason and error); names:
    `tetra_tf.contract.parse_record`.

    Args:
      number: the input line's number.
      index: the sentence's number in the line (documents), else None.
      sentence: the `TextSentence` (documents), else None.
      result: the sentence's or line's ParseResult or SentenceError.
    """
    record: dict[str, Any] = {parse_record.LINE: number}
    if sentence is not None:
        record[parse_record.SENTENCE_NUMBER] = index
        record.update(sentence.to_dict())
    else:
        record.update(parse_record.outcome_fields(result))
    return record


def svg_name(number: int, index: int | None) -> str:
    """The file --output_format=svg draws a sentence into: ``line-N.svg``, or with
    documents ``line-N-sentence-M.svg``."""
    return f"line-{number}" + (f"-sentence-{index}" if index is not None else "") + ".svg"


def _write_svg(folder: str, name: str, result, sentence) -> None:
    """Draws a parse (a document's sentence with its words as written) into folder/name.

    Raises:
      OutputError: the tree cannot be drawn, or the file cannot be written.
    """
    from tetra_tf.trees import drawing  # pylint: disable=import-outside-toplevel

    path = os.path.join(folder, name)
    try:
        svg = sentence.to_svg() if sentence is not None else result.to_svg()
    except ValueError as e:  # (a tree too deep to draw)
        raise OutputError(f"cannot draw {path}: {e}") from None
    try:
        with open(path, "w", encoding="utf-8") as file:
            file.write(drawing.XML_DECLARATION + svg + "\n")
    except OSError as e:
        raise OutputError(f"cannot write {path} ({e.strerror or e})") from None


def _check_output_format(output_format: str, k_best: bool, svg_dir: str | None,
                         marginals: bool) -> None:
    """InputError for an unknown format, --k_best without JSON (or with marginals), or SVG
    without a folder (which is made here if missing)."""
    if output_format not in OUTPUT_FORMATS:
        raise InputError(f"--output_format must be one of {', '.join(OUTPUT_FORMATS)}, got "
                         f"{output_format!r}")
    if k_best and output_format != JSON:
        raise InputError("--k_best needs --output_format=json")
    if k_best and marginals:
        raise InputError("--k_best cannot be combined with --marginals or --span_marginals "
                         "(they come from different signatures)")
    if output_format == SVG:
        if not svg_dir:
            raise InputError("--output_format=svg needs --output=DIR, a folder for the "
                             "drawings")
        try:
            os.makedirs(svg_dir, exist_ok=True)
        except OSError as e:
            raise InputError(f"--output: cannot make the folder {svg_dir} "
                             f"({e.strerror or e})") from None


def load_parser(model_dir: str):
    """Loads the Parser (TensorFlow starts here, not at import).

    Raises:
      ExportError: if model_dir holds no usable export.
    """
    from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel

    return Parser(model_dir)


@contextlib.contextmanager
def replacing_output(path: str) -> Iterator[IO[bytes]]:
    """Opens a binary stream whose content replaces the file at `path` only on success.

    A regular (or missing) file is written as a temporary file in the same directory and
    renamed onto it when the block ends without an exception; on an exception the
    temporary file is removed and an existing file stays untouched. A symbolic link's
    target is replaced and the link kept; an existing file's permissions are kept.
    Anything else (a device such as /dev/full, a pipe) is written directly.

    Raises:
      InputError: if the file cannot be created.
      OutputError: if the output cannot be completed (flush, close or rename).
    """
    target = os.path.realpath(path)
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise InputError(f"--output: cannot write {path} ({e.strerror})") from None
    if mode is not None and not stat.S_ISREG(mode):
        try:
            stream = open(path, "wb")  # pylint: disable=consider-using-with
        except OSError as e:
            raise InputError(f"--output: cannot write {path} ({e.strerror})") from None
        with _closing(stream, path):
            yield stream
        return
    directory, name = os.path.split(target)
    try:
        fd, temp_path = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    except OSError as e:
        raise InputError(f"--output: cannot write {path} ({e.strerror})") from None
    try:
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp_path, 0o666 & ~umask)
        else:
            os.chmod(temp_path, stat.S_IMODE(mode))
        with _closing(os.fdopen(fd, "wb"), path) as stream:
            yield stream
            try:
                stream.flush()
                os.fsync(stream.fileno())  # the content is on disk before the rename
            except OSError as e:
                raise OutputError(f"cannot write {path} ({e.strerror})") from None
        try:
            os.replace(temp_path, target)
        except OSError as e:
            raise OutputError(f"cannot write {path} ({e.strerror})") from None
    finally:
        if os.path.exists(temp_path):
            os.unlink(temp_path)


@contextlib.contextmanager
def _closing(stream: IO, name: str) -> Iterator[IO]:
    """Closes stream at the end; a failing flush or close (on success) is an OutputError."""
    try:
        yield stream
    except BaseException:
        with contextlib.suppress(OSError):
            stream.close()
        raise
    try:
        stream.close()
    except OSError as e:
        raise OutputError(f"cannot write {name} ({e.strerror or e})") from None


FLAGS = flags.FLAGS


# The common options of the bulk programs (tetra_tf/integrations/bulk_options.py) this program has.
BULK_OPTIONS = ("model_dir", "input", "output", "tokenize", "documents", "batch_size",
                "on_error", "errors", "max_words", "max_line_bytes")


def define_flags() -> None:
    """Defines the flags; only when run as a program, so that importing stays side-effect free."""
    bulk_options.define_absl_flags(BULK_OPTIONS)
    flags.DEFINE_bool("scores", False, "Write each tree's score (log-probability of its tags), "
                      "a tab, then the tree.")
    flags.DEFINE_bool("marginals", False, "Write each tree's probability among all valid "
                      "trees, a tab, each constituent's probability (space-separated, in the "
                      "order the tree opens their brackets), a tab, then the tree.")
    flags.DEFINE_float("span_marginals", None, "A probability P from 0 to 1: write the "
                       "--marginals columns, then every labelled span whose probability is "
                       "at least P, in the tree or not (START:END:LABEL:PROBABILITY, "
                       "space-separated, by START, END, then LABEL; START and END its first "
                       "and last word, 0-based), a tab, then the tree. A sentence of more "
                       f"than {export_format.MAX_MARGINALS_WORDS} words is then refused "
                       "(too_many_words).")
    flags.DEFINE_enum("output_format", TEXT, OUTPUT_FORMATS, "text: bracketed trees, one "
                      "line per input line (with the columns of --scores, --marginals, "
                      "--span_marginals, --documents); json: one JSON object per line (with "
                      "--documents, per sentence): line and sentence numbers, offsets, "
                      "words, POS tags, tree, score, and what --marginals, --span_marginals "
                      "and --k_best add, or a refusal's reason and error; svg: each tree "
                      "drawn into its own file in the folder --output names "
                      "(line-N.svg, with --documents line-N-sentence-M.svg).")
    flags.DEFINE_bool("k_best", False, "With --output_format=json: also each sentence's "
                      f"best trees (at most {export_format.K_BEST}) and their scores.")
    flags.DEFINE_bool("describe", False, "Print the export's model card (encoder, data, "
                      "dev/test F1) and exit.")


def _open_errors(path: str | None) -> TextIO | None:
    if path is None:
        return None
    try:
        return open(path, "w", encoding="utf-8")  # pylint: disable=consider-using-with
    except OSError as e:
        raise InputError(f"--errors: cannot write {path} ({e.strerror})") from None


def _parse_flagged_files() -> Summary:
    """`run` on the input, output and errors files that the flags name."""
    with contextlib.ExitStack() as stack:
        if FLAGS.input:
            try:
                input_file = stack.enter_context(sentences.decompressed(
                    stack.enter_context(open(FLAGS.input, "rb")), FLAGS.input))
            except OSError as e:
                raise InputError(f"--input: cannot read {FLAGS.input} ({e.strerror})") from None
        else:
            input_file = sys.stdin.buffer
        errors_file = _open_errors(FLAGS.errors)
        if errors_file is not None:
            stack.enter_context(_closing(errors_file, FLAGS.errors))
        drawing = FLAGS.output_format == SVG  # --output names the drawings' folder
        output_file = (stack.enter_context(replacing_output(FLAGS.output))
                       if FLAGS.output and not drawing else sys.stdout.buffer)
        return run(FLAGS.model_dir, input_file, output_file, FLAGS.tokenize,
                   FLAGS.batch_size, progress=bool(FLAGS.input), on_error=FLAGS.on_error,
                   errors_file=errors_file, max_words=FLAGS.max_words,
                   max_line_bytes=FLAGS.max_line_bytes, output_name=FLAGS.output or "stdout",
                   errors_name=FLAGS.errors or "stderr", scores=FLAGS.scores,
                   documents=FLAGS.documents, marginals=FLAGS.marginals,
                   span_marginals=FLAGS.span_marginals, output_format=FLAGS.output_format,
                   k_best=FLAGS.k_best, svg_dir=FLAGS.output if drawing else None)


def main(argv) -> int:
    """Parses as the flags say; `cli.run` reports its InputErrors (exit 2) and failures (1).

    Returns:
      cli.EXIT_USAGE after a bad line (with --on_error=fail), cli.EXIT_FAILURE if the output
      could not be written, else cli.EXIT_OK.
    """
    del argv
    _check_span_marginals(FLAGS.span_marginals)  # before the model directory is read
    if FLAGS.output_format != SVG:  # (the folder is made once the input opens)
        _check_output_format(FLAGS.output_format, FLAGS.k_best, None,
                             FLAGS.marginals or FLAGS.span_marginals is not None)
    bulk_options.check(bulk_options.absl_values(BULK_OPTIONS))
    if FLAGS.describe:
        sys.stdout.write(export_format.describe(packaged_models.resolve(FLAGS.model_dir)))
        return cli.EXIT_OK
    output_existed = bool(FLAGS.output) and os.path.exists(FLAGS.output)
    try:
        summary = _parse_flagged_files()
    except BadLineError as e:
        if FLAGS.output_format == SVG:
            done = f"the trees before it are drawn in {FLAGS.output}"
        elif FLAGS.output:
            done = (f"{FLAGS.output} was left unchanged" if output_existed
                    else f"{FLAGS.output} was not created")
        elif e.trees_written:
            lines = "" if FLAGS.documents else f" (lines 1-{e.trees_written})"
            done = (f"{e.trees_written} tree{'s' if e.trees_written != 1 else ''}{lines} went "
                    "to stdout before it")
        else:
            done = "no tree went to stdout"
        skip = ("an empty tree for a bad sentence, nothing for a bad line" if FLAGS.documents
                else "an empty line for a bad line")
        print(f"error: {e}; stopped: {done} (--on_error=skip writes {skip} and goes on)",
              file=sys.stderr)
        return cli.EXIT_USAGE
    except (OutputError, BrokenPipeError) as e:
        if not FLAGS.output or isinstance(e, BrokenPipeError):
            _silence_stdout()
        message = str(e) if isinstance(e, OutputError) else "cannot write stdout (broken pipe)"
        print(f"error: {message}", file=sys.stderr)
        return cli.EXIT_FAILURE
    if FLAGS.on_error == "skip":
        where = f", listed in {FLAGS.errors}" if FLAGS.errors and sum(summary.bad.values()) else ""
        print(f"{summary}{where}", file=sys.stderr)
    return cli.EXIT_OK


def _silence_stdout() -> None:
    """Points stdout at /dev/null, so that Python's final flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


if __name__ == "__main__":
    define_flags()
    cli.run(main)
