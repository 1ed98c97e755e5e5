"""Corpus-scale parsing as an Apache Beam pipeline over the exported SavedModel.

```text
files ─► lines read and checked ─┬─► Reshuffle ─► sort and batch ─► RunInference(handler)
                                 │   ─┬─► OUTPUT-SSSSS-of-NNNNN.jsonl
                                 ▼    ▼
                 OUTPUT-errors-SSSSS-of-NNNNN.jsonl (dead letters)
```

`run` runs it (`python -m tetra_tf.beam_parse` is the command line); `build` adds it to a
pipeline of one's own.

Every input line ends in exactly one of the two outputs: a parsed record
``{"file", "line", "tree", "score"}`` or a dead letter ``{"file", "line", "reason", "error"}``
(reasons: `sentences.REASONS`). With `marginals`, a parsed record also has
``"tree_probability"`` (the tree's probability among all valid trees) and
``"constituent_marginals"`` (each constituent's probability, in the order the tree string
opens their brackets), as `Parser.parse_each(marginals=True)` gives them (`ParseResult`);
with `span_marginals` (a floor p from 0 to 1, implying `marginals`), also
``"span_marginals"``: every labelled span, in the tree or not, whose probability is at least
p, ``[{"label", "start", "end", "probability"}, ...]`` (start and end: first and last word,
0-based, inclusive), in `Parser.parse_each(span_marginals=p)`'s order (by start, end,
label). Dead letters are the same either way. With `ordered`, each input file also gets
``OUTPUT-ordered/<its path below the input files' common folder>.trees``: one tree per input
line, in input order, an empty line where the input line was rejected (EVALB-ready when none
was); an input file without lines gets an empty one. `bulk_options.OrderedWriter` writes
these files, as it does Spark's.

Lines: each file is read whole by one DoFn that streams its lines (``fileio.MatchAll`` and
``ReadMatches``; ``.gz`` and the other compressions Beam knows are opened by extension), so
line numbers are exact; ReadFromText would split large files across workers and lose them.
A Reshuffle after reading spreads the lines of one large file over all workers. Lines are
read and checked by `tetra_tf.contract.sentences.read_lines`, as every way in reads them:
UTF-8; line ends "\\n" (a "\\r" before it is dropped); a UTF-8 BOM opening a file is
dropped; a line over `max_line_bytes` is skipped over without being held (also inside .gz,
.bz2, .xz and .zst files, which `sentences.decompressed` reads as streams; deflate files go
through Beam's reader, which inflates 16 MiB of compressed input at a time); the dead
letters carry the sentence contract's reason codes (tetra_tf/contract/sentences.py: the same as the
parse CLI's, Spark's and the servers'). A truncated or corrupt compressed file keeps its
readable lines and gets one `damaged` dead letter where the damage starts; the job goes on.
A sentence the model refuses alone (`Parser.parse_each`) is a dead letter with its reason;
a failure of the model itself fails the job (it is not a bad line).

Runs on any Beam runner; locally use FnApiRunner (the default of `tetra_tf.beam_parse`): in
Beam 2.77 the DirectRunner first tries the Prism runner, which downloads a binary.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from typing import (TYPE_CHECKING, Any, BinaryIO, Iterable, Iterator, NamedTuple, Optional,
                    Sequence)

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.fileio import EmptyMatchTreatment
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.ml.inference.base import ModelHandler, PredictionResult, RunInference

from tetra_tf import packaged_models
from tetra_tf.contract import export_format, parse_record, sentences
from tetra_tf.contract import text as text_lib
from tetra_tf.contract.export_format import DEFAULT_BATCH_SIZE
from tetra_tf.integrations import bulk_options

if TYPE_CHECKING:  # tetra_tf.parser loads TensorFlow: only the workers that parse import it
    from tetra_tf.contract.parse_record import ParseResult
    from tetra_tf.parser import Parser

METRICS_NAMESPACE = "tetra_tf"
"""The Beam metrics namespace of the pipeline's counters (see `counters`)."""
RECORDS_SUFFIX = ".jsonl"
"""The suffix of every output file of records and dead letters."""
ERRORS_INFIX = "-errors"
"""Added to the output prefix for the dead letters' files (OUTPUT-errors-SSSSS-of-NNNNN)."""


class Sentence(NamedTuple):
    """A validated input line: its words (as `sentences.read_lines` split them) joined by single
    spaces; what `ReadSentences` emits and `ParseModelHandler` parses.

    Attributes:
      file: the input file's path, as Beam's match names it (e.g. ``/data/in.txt``,
        ``gs://bucket/in.txt.gz``).
      line: the line's number in its file, from 1.
      text: the line's words (PTB tokens with tokenize) joined by single spaces.
      num_words: how many words: the sentence's weight in a batch (`sentence_words`).
      sentence_number, start, end: with documents, the sentence's number in its line (from 1)
        and its character offsets in the line; 0, -1, -1 for a line that is a sentence.
    """
    file: str
    line: int  # 1-based
    text: str
    num_words: int
    sentence_number: int = 0  # with documents: its number in the line, from 1 (0: none)
    start: int = -1  # with documents: its character offsets in the line
    end: int = -1


class ParseOptions(NamedTuple):
    """What the pipeline reads, how it parses and where it writes (`build`, `run`).

    Attributes:
      model_dir: a packaged model's name (every worker has tetra-tf installed), or an
        export's directory readable by every worker; None: the packaged default model
        (`tetra_tf.packaged_models.DEFAULT_MODEL`).
      inputs: files or glob patterns (any of Beam's file systems); each must match a file.
      output: the prefix of every output file: records ``OUTPUT-SSSSS-of-NNNNN.jsonl``, dead
        letters ``OUTPUT-errors-SSSSS-of-NNNNN.jsonl``, and with ordered the folder
        ``OUTPUT-ordered/``.
      tokenize: each line is raw text: split it into PTB tokens
        (`tetra_tf.contract.text.ptb_tokenize`) instead of on whitespace. Default False.
      documents: each line is a document of raw text, split into sentences and PTB tokens
        (`tetra_tf.contract.text`); each sentence is its own record or dead letter, with its
        ``sentence_number`` in the line (from 1) and its ``start`` and ``end`` character
        offsets; a blank line has none. Not with ordered. Default False.
      max_words: a line of more words is a dead letter (``too_many_words``); 0 (the
        default): no limit beyond the export's (``too_many_pieces``).
      max_line_bytes: a line of more bytes is a dead letter (``too_long``); default
        `sentences.DEFAULT_MAX_LINE_BYTES` (1 MiB).
      batch_size: most sentences per model call (default `DEFAULT_BATCH_SIZE`, 64).
      ordered: also write each input file's trees in input order (see the module doc).
        Default False.
      marginals: also give each parsed record ``tree_probability`` and
        ``constituent_marginals`` (see the module doc); a sentence longer than the
        export's parse_marginals signature takes is then a ``too_many_words`` dead letter.
        Default False.
      span_marginals: a floor p from 0 to 1: also give each parsed record
        ``span_marginals``, every labelled span whose probability is at least p (see the
        module doc), and what marginals gives; a sentence of more than the export's
        parse_span_marginals bound (256 words) is then a ``too_many_words`` dead letter.
        Default None: none. A floor outside 0..1 (or NaN) is a ValueError of `build`.

    Example:
        ```python
        from tetra_tf.integrations import beam as tetra_beam

        options = tetra_beam.ParseOptions(model_dir="models/tetra/1",
                                          inputs=["corpus/*.txt.gz"], output="out/trees",
                                          max_words=400)
        ```
    """
    model_dir: str | None
    inputs: Sequence[str]  # files or glob patterns
    output: str  # prefix of every output file
    tokenize: bool = False
    documents: bool = False
    max_words: int = 0  # longer lines are dead letters; 0: none beyond the export's
    max_line_bytes: int = sentences.DEFAULT_MAX_LINE_BYTES  # longer lines are dead letters
    batch_size: int = DEFAULT_BATCH_SIZE  # most sentences per model call
    ordered: bool = False
    marginals: bool = False  # records also get tree_probability and constituent_marginals
    span_marginals: float | None = None  # a floor: records also get every labelled span


def _counter(name: str):
    return Metrics.counter(METRICS_NAMESPACE, name)


class ParseModelHandler(ModelHandler[Sentence, PredictionResult, "Parser"]):
    """RunInference's handler for the tetra-tf SavedModel.

    Loads a `tetra_tf.parser.Parser` once per worker process (RunInference shares it between
    the process's threads) and parses each batch with its `parse_each`, which owns the
    failure policy: a sentence it refuses gets an inference of ``{"error": SentenceError}``
    instead of ``{"tree", "score"}`` (with marginals also ``"tree_probability"`` and
    ``"constituent_marginals"``, with span_marginals those and ``"span_marginals"``); a
    failure of the model itself raises, and fails the job.

    Batches hold at most batch_size sentences and the words the export takes in one call
    (`batch_elements_kwargs`). Beam 2.77's BatchElements rejects ``max_batch_weight``, so
    the pipeline batches with ``SortAndBatchElements(**handler.batch_elements_kwargs())``
    and gives RunInference ``handler.with_no_batching()``.

    RunInference's own metrics (``num_inferences``, ...) go to `METRICS_NAMESPACE` too.

    Example:
        ```python
        import apache_beam as beam
        from apache_beam.ml.inference.base import RunInference
        from tetra_tf.integrations import beam as tetra_beam

        handler = tetra_beam.ParseModelHandler("models/tetra/1", batch_size=32)
        results = (sentences   # a PCollection of tetra_beam.Sentence
                   | beam.SortAndBatchElements(**handler.batch_elements_kwargs())
                   | RunInference(handler.with_no_batching()))
        # each a PredictionResult: example the Sentence, inference {"tree", "score"}
        # or {"error": SentenceError}; tetra_beam.SplitResults turns them into records
        ```
    """

    def __init__(self, model_dir: str | None = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 max_words: int = 0, max_batch_words: int | None = None,
                 marginals: bool = False, span_marginals: float | None = None):
        """Makes the handler; the model is loaded later, on the workers (`load_model`).

        Args:
          model_dir: a packaged model's name, or an export's directory readable by every
            worker; None (the default): the packaged default model.
          batch_size: most sentences per batch, so per model call (default
            `DEFAULT_BATCH_SIZE`, 64).
          max_words: the pipeline's own words-per-sentence limit; a longer sentence gets a
            ``too_many_words`` error (0, the default: the export's limit only).
          max_batch_words: most words per batch; by default what the export takes in one
            call (its max_pieces_per_call // max_pieces_per_word), or batch_size * 64 for
            an export that does not publish them.
          marginals: parse with `Parser.parse_each(marginals=True)`: each inference also
            has the tree's probability and each constituent's (see `run_inference`).
          span_marginals: a floor p from 0 to 1: parse with
            `Parser.parse_each(span_marginals=p)`: each inference also has every labelled
            span at or above p, and what marginals gives. None (the default): none.

        Raises:
          ValueError: span_marginals outside 0..1 (or NaN).
          tetra_tf.errors.ExportError: the export's limits file (assets.extra/limits.json)
            is there but unreadable (only read when max_batch_words is None).
        """
        if span_marginals is not None:
            export_format.check_span_floor(span_marginals)
        if max_batch_words is None:
            limits = sentences.SentenceLimits.from_export(export_format.read_limits(
                packaged_models.resolve(model_dir)))
            max_batch_words = (limits.max_pieces // limits.max_pieces_per_word
                               if limits.max_pieces and limits.max_pieces_per_word
                               else batch_size * 64)
        super().__init__(min_batch_size=1, max_batch_size=batch_size,
                         max_batch_weight=max_batch_words, element_size_fn=sentence_words)
        self._model_dir = model_dir
        self._max_words = max_words
        self._marginals = marginals
        self._span_marginals = span_marginals

    def load_model(self) -> Parser:
        """Loads the parser; RunInference calls it once per worker process.

        Returns:
          A `tetra_tf.parser.Parser` of model_dir.

        Raises:
          tetra_tf.errors.ExportError: model_dir is not a usable tetra-tf export (the
            pipeline fails).
        """
        from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel

        return Parser(self._model_dir)

    def run_inference(self, batch: Sequence[Sentence], model: Parser,
                      inference_args: Optional[dict[str, Any]] = None
                      ) -> Iterable[PredictionResult]:
        """Parses one batch of sentences with `Parser.parse_each`, each failing alone.

        Args:
          batch: the sentences, parsed in one model call if the graph takes them together.
          model: the parser `load_model` gave.
          inference_args: RunInference's extra arguments (not used).

        Returns:
          A `PredictionResult` per sentence, in batch order: ``example`` the `Sentence`,
          ``inference`` either ``{"tree": str, "score": float}`` (the one-line bracketed
          tree and its log-probability; with marginals also ``"tree_probability": float``
          and ``"constituent_marginals": [float, ...]``, with span_marginals those and
          ``"span_marginals": [{"label", "start", "end", "probability"}, ...]``, see
          `parse_fields`) or
          ``{"error": SentenceError}`` for a sentence refused alone (``too_many_words``,
          ``too_many_pieces``, ``rejected``). A refused sentence is never raised.

        Raises:
          tetra_tf.errors.ModelError: the model itself failed; the bundle fails, and after
            the runner's retries the pipeline.
        """
        if not batch:
            return []
        results = model.parse_each([sentence.text.split(" ") for sentence in batch],
                                   batch_size=len(batch),
                                   limits=model.sentence_limits.lowered(self._max_words),
                                   marginals=self._marginals,
                                   span_marginals=self._span_marginals)
        return [PredictionResult(sentence, {"error": result}
                                 if isinstance(result, sentences.SentenceError)
                                 else parse_fields(result, self._marginals,
                                                   self._span_marginals))
                for sentence, result in zip(batch, results)]

    def get_num_bytes(self, batch: Sequence[Sentence]) -> int:
        """A batch's size for RunInference's byte-size metric.

        Args:
          batch: the sentences.

        Returns:
          The total length of their texts, in characters.
        """
        return sum(len(sentence.text) for sentence in batch)

    def get_metrics_namespace(self) -> str:
        """The namespace of RunInference's metrics for this handler.

        Returns:
          `METRICS_NAMESPACE` (``"tetra_tf"``), the pipeline's own counters' namespace.
        """
        return METRICS_NAMESPACE


def parse_fields(result: ParseResult, marginals: bool = False,
                 span_marginals: float | None = None) -> dict[str, Any]:
    """A parsed sentence's fields in its record.

    Args:
      result: the sentence's `tetra_tf.contract.parse_record.ParseResult`.
      marginals: also its marginals (result was parsed with ``marginals=True``).
      span_marginals: the floor result was parsed with (``span_marginals=p``): also its
        labelled spans, and its marginals. None (the default): neither.

    Returns:
      ``{"tree": str, "score": float}`` (the one-line bracketed tree, its
      log-probability); with marginals (or span_marginals) also ``"tree_probability":
      float`` and ``"constituent_marginals": [float, ...]`` (`ParseResult`'s, as a list);
      with span_marginals also ``"span_marginals": [{"label": str, "start": int, "end":
      int, "probability": float}, ...]`` (`ParseResult.span_marginals`, in its order;
      `parse_record.span_records`). The names and values are `parse_record`'s: the
      same as in `ParseResult.to_dict` and the parse command's JSON.
    """
    del marginals, span_marginals  # the result holds what it was parsed with
    return parse_record.bulk_fields(result)


def sentence_words(sentence: Sentence) -> int:
    """A sentence's weight in a batch: its number of words (the handler's element_size_fn).

    Args:
      sentence: a `Sentence`.

    Returns:
      sentence.num_words.
    """
    return sentence.num_words


class _RawStream(io.RawIOBase):
    """A binary stream with only read(size), such as Beam's CompressedFile, as a raw stream:
    io.BufferedReader over it has the readline(size) that `sentences.read_lines` needs."""

    def __init__(self, stream):
        super().__init__()
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._stream.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


@contextlib.contextmanager
def _open_binary(readable: fileio.ReadableFile) -> Iterator[BinaryIO]:
    """A matched file's decompressed bytes (compression by extension), with readline(size).

    .gz, .bz2, .xz and .zst go through `sentences.decompressed` (streaming decompressors
    whose reads stay bounded, so that a line over max_line_bytes is skipped in pieces even
    when it compresses well, and which report a cut-short file); deflate through Beam's
    CompressedFile, which inflates 16 MiB of compressed input at once.
    """
    path = readable.metadata.path
    with readable.open(compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        stream = sentences.decompressed(raw, path)
        if stream is not raw:
            with stream:
                yield stream
            return
    compression = CompressionTypes.detect_compression_type(path)
    with readable.open(compression_type=compression) as stream:
        yield io.BufferedReader(_RawStream(stream))


class ReadSentences(beam.DoFn):
    """One matched file → a `Sentence` per line to parse, a dead letter (tagged REJECTED) per
    other line; the lines are read and checked by `sentences.read_lines`.

    The file is read whole, as a stream, so line numbers are exact; its compression is
    told by its extension (.gz, .bz2, .xz, .lzma, .zst through `sentences.decompressed`,
    the others Beam knows through Beam). Counters (`METRICS_NAMESPACE`): ``files_read``,
    ``lines_read`` and ``rejected_<reason>``.

    Outputs:
      - main: a `Sentence` per line with words.
      - REJECTED: a `dead_letter` dict ``{"file", "line", "reason", "error"}`` per refused
        line, reason ``empty``, ``not_utf8``, ``too_long``, ``too_many_words``,
        ``too_many_pieces`` (per limits), or ``damaged`` once where a compressed file turns
        out cut short or corrupt (after its readable lines; nothing after it is read).

    Example:
        ```python
        import apache_beam as beam
        from apache_beam.io import fileio
        from tetra_tf.integrations import beam as tetra_beam
        from tetra_tf.contract import sentences

        limits = sentences.SentenceLimits().lowered(max_words=400)
        read = (pipeline
                | fileio.MatchFiles("corpus/*.txt.gz") | fileio.ReadMatches()
                | beam.ParDo(tetra_beam.ReadSentences(False, limits)).with_outputs(
                    tetra_beam.ReadSentences.REJECTED, main="sentences"))
        read.sentences                              # Sentence elements
        read[tetra_beam.ReadSentences.REJECTED]     # dead-letter dicts
        ```
    """
    REJECTED = "rejected"
    """The tag of the dead letters' output."""

    def __init__(self, tokenize: bool, limits: sentences.SentenceLimits,
                 documents: bool = False):
        """Makes the DoFn; its counters are made on the worker (`setup`).

        Args:
          tokenize: each line is raw text: split it into PTB tokens
            (`tetra_tf.contract.text.ptb_tokenize`) instead of on whitespace.
          limits: the bounds each line is checked against (max_line_bytes, max_words;
            e.g. ``SentenceLimits().lowered(max_words, max_line_bytes)``).
          documents: each line is a document: a `Sentence` (or dead letter) per sentence
            of it (`tetra_tf.contract.text.tokenize_document`), with its number and offsets.
        """
        self._tokenize = tokenize
        self._limits = limits
        self._documents = documents

    def setup(self):
        """Makes the counters (Beam calls it once per DoFn instance on a worker)."""
        self._files_read = _counter("files_read")
        self._lines_read = _counter("lines_read")
        self._rejected = {reason: _counter(f"rejected_{reason}")
                          for reason in sentences.REASONS}

    def process(self, readable: fileio.ReadableFile):
        """Reads one file's lines.

        Args:
          readable: a file from ``fileio.ReadMatches``.

        Yields:
          A `Sentence` per line with words; a ``TaggedOutput(REJECTED, dead letter)`` per
          refused line, in line order.

        Raises:
          tetra_tf.contract.sentences.ReadError: the file could not be read (an I/O failure, not
            bad content): the bundle fails.
        """
        path = readable.metadata.path
        self._files_read.inc()
        with _open_binary(readable) as stream:
            lines = sentences.read_lines(stream, self._limits,
                                         text_lib.word_splitter(self._tokenize), self._documents)
            for line in lines:
                self._lines_read.inc()
                if line.error is not None:
                    self._rejected[line.error.reason].inc()
                    yield beam.pvalue.TaggedOutput(self.REJECTED, dead_letter(
                        path, line.number, line.error))
                elif not self._documents:
                    yield Sentence(path, line.number, " ".join(line.words), len(line.words))
                else:
                    yield from self._document(path, line)

    def _document(self, path: str, line: sentences.Line):
        """A document line's sentences, each checked as a line of words is."""
        checked = text_lib.checked_document(line.text, self._limits)
        for index, (sentence, error) in enumerate(checked, start=1):
            if error is not None:
                self._rejected[error.reason].inc()
                yield beam.pvalue.TaggedOutput(self.REJECTED, dead_letter(
                    path, line.number, error, (index, sentence.start, sentence.end)))
                continue
            yield Sentence(path, line.number, " ".join(sentence.words), len(sentence.tokens),
                           index, sentence.start, sentence.end)


def dead_letter(path: str, number: int, error: sentences.SentenceError,
                sentence: tuple[int, int, int] | None = None) -> dict:
    """A dead-letter record: where the line (or sentence) is and why it was refused.

    Args:
      path: the input file's path.
      number: the line's number, from 1.
      error: the refusal.
      sentence: with documents, the sentence's (number in the line, start, end).

    Returns:
      ``{"file": path, "line": number, "reason": error.reason, "error": str(error)}``,
      with ``sentence_number``, ``start`` and ``end`` for a document's sentence; the error is
      "REASON: detail" (e.g. ``"empty: no words (give one sentence per line)"``), the
      reason one of `sentences.REASONS`.
    """
    record = {parse_record.FILE: path, parse_record.LINE: number,
              **parse_record.error_fields(error)}
    if sentence is not None:
        record.update(zip((parse_record.SENTENCE_NUMBER, parse_record.START,
                           parse_record.END), sentence))
    return record


def _place(sentence: Sentence) -> tuple[int, int, int] | None:
    """A document sentence's (number, start, end); None for a line that is a sentence."""
    return ((sentence.sentence_number, sentence.start, sentence.end)
            if sentence.sentence_number else None)


class SplitResults(beam.DoFn):
    """RunInference results → parsed records, or dead letters of refused sentences (tagged
    REJECTED).

    Counters (`METRICS_NAMESPACE`): ``sentences_parsed``, ``words_parsed`` and
    ``rejected_<reason>``.

    Outputs:
      - main: a record ``{"file": str, "line": int, "tree": str, "score": float}`` per
        parsed sentence (and the inference's marginals and spans, when it has them).
      - REJECTED: a `dead_letter` per sentence `ParseModelHandler` refused (reason
        ``too_many_words``, ``too_many_pieces`` or ``rejected``).
    """
    REJECTED = "rejected"
    """The tag of the dead letters' output."""

    def setup(self):
        """Makes the counters (Beam calls it once per DoFn instance on a worker)."""
        self._parsed = _counter("sentences_parsed")
        self._words = _counter("words_parsed")
        self._rejected = {reason: _counter(f"rejected_{reason}")
                          for reason in sentences.REASONS}

    def process(self, result: PredictionResult):
        """Turns one of `ParseModelHandler.run_inference`'s results into its record.

        Args:
          result: example a `Sentence`, inference `parse_fields` or ``{"error"}``.

        Yields:
          The parsed record, or ``TaggedOutput(REJECTED, dead letter)``.
        """
        sentence: Sentence = result.example
        inference = result.inference
        if "error" in inference:
            self._rejected[inference["error"].reason].inc()
            yield beam.pvalue.TaggedOutput(self.REJECTED, dead_letter(
                sentence.file, sentence.line, inference["error"], _place(sentence)))
            return
        self._parsed.inc()
        self._words.inc(sentence.num_words)
        record = {parse_record.FILE: sentence.file, parse_record.LINE: sentence.line}
        if sentence.sentence_number:
            record.update({parse_record.SENTENCE_NUMBER: sentence.sentence_number,
                           parse_record.START: sentence.start, parse_record.END: sentence.end})
        yield {**record, **inference}


def _create(path: str) -> BinaryIO:
    """A new file at path on any of Beam's file systems (a local path's folders made)."""
    if "://" not in path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return FileSystems.create(path, mime_type="text/plain",
                              compression_type=CompressionTypes.UNCOMPRESSED)


class WriteOrdered(beam.DoFn):
    """(file, [(line, tree or None), and one None]) → that file's trees in input order, written
    by `bulk_options.OrderedWriter` (the None stands for the file itself, so that a file
    without lines gets its empty file); root: the input files' common folder."""

    def __init__(self, folder: str):
        """Makes the DoFn.

        Args:
          folder: where the ``.trees`` files go (`bulk_options.ordered_folder` of the
            output), on any of Beam's file systems.
        """
        self._folder = folder

    def process(self, element: tuple[str, Iterable[Optional[tuple[int, Optional[str]]]]],
                root: str) -> Iterator[str]:
        """Writes one input file's ``.trees`` file.

        Args:
          element: the input file's path, and its values grouped: (line number, tree, or
            None for a refused line) per line, in any order, and one None for the file.
          root: the input files' `bulk_options.common_folder` (a side input).

        Yields:
          The path of the file written.

        Raises:
          RuntimeError: a line is missing or comes twice (the results are incomplete).
        """
        path, values = element
        lines = sorted((value for value in values if value is not None),
                       key=lambda value: value[0])
        yield bulk_options.OrderedWriter(self._folder, root, _create).write(path, lines)


def _to_json(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False)


def build(pipeline: beam.Pipeline, options: ParseOptions,
          handler: Optional[ModelHandler] = None) -> dict[str, beam.PCollection]:
    """Adds the parsing pipeline to `pipeline`; returns its "parsed" and "rejected" records.

    The pipeline matches options.inputs, reads each file's lines (`ReadSentences`), parses
    them in sorted batches with RunInference (`ParseModelHandler`), splits the results
    (`SplitResults`) and writes records and dead letters as JSON lines under
    options.output (see the module doc), and with options.ordered the ``.trees`` files
    (`WriteOrdered`). Nothing runs until the pipeline does; a pattern that matches no file
    then fails it.

    Args:
      pipeline: the Beam pipeline to add the transforms to.
      options: what to read, how to parse, where to write.
      handler: the model handler (tests inject failing ones); by default a
        `ParseModelHandler` of options.model_dir with options.batch_size, max_words and
        marginals and span_marginals (a handler given is used as it is: its own marginals
        count).

    Returns:
      ``{"parsed": PCollection, "rejected": PCollection}`` of dicts, every input line in
      exactly one: parsed ``{"file": str, "line": int, "tree": str, "score": float}``
      (with options.marginals also ``tree_probability`` and ``constituent_marginals``;
      with options.span_marginals those and ``span_marginals``);
      rejected ``{"file": str, "line": int, "reason": str, "error": str}`` with reason one
      of `sentences.REASONS` (``empty``, ``not_utf8``, ``too_long``, ``damaged`` and
      ``too_many_words`` from reading; ``too_many_pieces`` and ``rejected`` from the model)
      and error "REASON: detail".

    Raises:
      tetra_tf.errors.ExportError: the default handler cannot read the export's limits
        file (see `ParseModelHandler`).
      ValueError: options.span_marginals outside 0..1 (or NaN), or documents with ordered.

    Example:
        ```python
        import apache_beam as beam
        from apache_beam.options.pipeline_options import PipelineOptions
        from tetra_tf.integrations import beam as tetra_beam

        options = tetra_beam.ParseOptions(model_dir="models/tetra/1",
                                          inputs=["corpus/*.txt"], output="out/trees")
        with beam.Pipeline(options=PipelineOptions(runner="FnApiRunner")) as pipeline:
            outputs = tetra_beam.build(pipeline, options)
            _ = (outputs["rejected"]
                 | beam.Map(lambda record: f"{record['file']}:{record['line']} "
                                           f"{record['error']}")
                 | beam.Map(print))
        ```
    """
    if options.documents and options.ordered:
        raise ValueError("ordered output is one tree per line: not with documents")
    if options.span_marginals is not None:
        export_format.check_span_floor(options.span_marginals)
    handler = handler or ParseModelHandler(options.model_dir, options.batch_size,
                                           options.max_words, marginals=options.marginals,
                                           span_marginals=options.span_marginals)
    matched = (pipeline
               | "Patterns" >> beam.Create(list(options.inputs))
               | "Match" >> fileio.MatchAll(EmptyMatchTreatment.DISALLOW))
    files = matched | "SpreadFiles" >> beam.Reshuffle() | "Open" >> fileio.ReadMatches()
    checked = (files
               | "ReadSentences" >> beam.ParDo(ReadSentences(
                   options.tokenize, sentences.SentenceLimits().lowered(
                       options.max_words, options.max_line_bytes), options.documents))
               .with_outputs(ReadSentences.REJECTED, main="sentences"))
    results = (checked.sentences
               | "SpreadLines" >> beam.Reshuffle()
               | "SortAndBatch" >> beam.SortAndBatchElements(**handler.batch_elements_kwargs())
               | "Parse" >> RunInference(handler.with_no_batching())
               | "Split" >> beam.ParDo(SplitResults()).with_outputs(SplitResults.REJECTED,
                                                                       main="parsed"))
    rejected = ((checked[ReadSentences.REJECTED], results[SplitResults.REJECTED])
                | "AllRejected" >> beam.Flatten())
    parsed = results.parsed
    (parsed | "RecordsToJson" >> beam.Map(_to_json)
     | "WriteRecords" >> beam.io.WriteToText(options.output, file_name_suffix=RECORDS_SUFFIX))
    (rejected | "ErrorsToJson" >> beam.Map(_to_json)
     | "WriteErrors" >> beam.io.WriteToText(options.output + ERRORS_INFIX,
                                            file_name_suffix=RECORDS_SUFFIX))
    if options.ordered:
        paths = matched | "FilePaths" >> beam.Map(lambda metadata: metadata.path)
        root = paths | "CommonFolder" >> beam.CombineGlobally(bulk_options.common_folder)
        every_file = paths | "EveryFile" >> beam.Map(lambda path: (path, None))
        trees = parsed | "TreeByFile" >> beam.Map(lambda r: (r["file"], (r["line"], r["tree"])))
        blanks = rejected | "BlankByFile" >> beam.Map(lambda r: (r["file"], (r["line"], None)))
        ((every_file, trees, blanks) | "AllByFile" >> beam.Flatten()
         | "GroupByFile" >> beam.GroupByKey()
         | "WriteOrdered" >> beam.ParDo(WriteOrdered(bulk_options.ordered_folder(options.output)),
                                        root=beam.pvalue.AsSingleton(root)))
    return {"parsed": parsed, "rejected": rejected}


def counters(result) -> dict[str, int]:
    """The pipeline's tetra_tf counters (committed values) after it finished.

    Args:
      result: the finished pipeline's PipelineResult (``pipeline.run()``, waited for).

    Returns:
      Each counter of `METRICS_NAMESPACE` by name, summed over steps: those the pipeline
      incremented of ``files_read``, ``lines_read``, ``sentences_parsed``,
      ``words_parsed`` and ``rejected_<reason>``, and RunInference's own counters
      (``num_inferences``, ``failed_batches_counter``). A counter never incremented may be
      missing (`run` adds its own as 0).
    """
    from apache_beam.metrics.metric import MetricsFilter  # pylint: disable=import-outside-toplevel

    query = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE))
    totals: dict[str, int] = {}
    for counter in query["counters"]:
        name = counter.key.metric.name
        totals[name] = totals.get(name, 0) + int(counter.committed or 0)
    return totals


def run(options: ParseOptions, pipeline_options, handler: Optional[ModelHandler] = None
        ) -> dict[str, int]:
    """Runs the pipeline (`build`) to the end; returns its counters (see `counters`).

    Args:
      options: what to read, how to parse, where to write.
      pipeline_options: Beam's PipelineOptions (the runner and its options); locally use
        ``PipelineOptions(runner="FnApiRunner")``.
      handler: the model handler; by default a `ParseModelHandler` (as `build`).

    Returns:
      The counters by name (`counters`), with ``files_read``, ``lines_read``,
      ``sentences_parsed``, ``words_parsed`` and ``rejected_<reason>`` for every reason of
      `sentences.REASONS` always present (0 if none). Every line read is parsed or
      rejected: ``lines_read`` = ``sentences_parsed`` + the ``rejected_*`` counts (with
      documents, every sentence is, and a line has any number of them).

    Raises:
      tetra_tf.errors.ExportError: as `build`, before the pipeline runs.
      ValueError: as `build`, before the pipeline runs.
      Exception: the runner's error for a failed pipeline: an input pattern that matches
        no file, a model that does not load (ExportError), or a model failing itself
        (`tetra_tf.errors.ModelError`, whose message "the model failed: ..." the runner's
        error carries). A refused sentence never fails it: it is a dead letter.

    Example:
        ```python
        from apache_beam.options.pipeline_options import PipelineOptions
        from tetra_tf.integrations import beam as tetra_beam

        options = tetra_beam.ParseOptions(model_dir="models/tetra/1", inputs=["corpus/*.txt"],
                                          output="out/trees", max_words=400, ordered=True)
        totals = tetra_beam.run(options, PipelineOptions(runner="FnApiRunner"))
        print(totals["sentences_parsed"], "of", totals["lines_read"], "lines parsed")
        # out/trees-00000-of-00001.jsonl, out/trees-errors-00000-of-00001.jsonl and
        # out/trees-ordered/*.trees
        ```
    """
    pipeline = beam.Pipeline(options=pipeline_options)
    build(pipeline, options, handler)
    result = pipeline.run()
    result.wait_until_finish()
    totals = counters(result)
    for name in ("lines_read", "sentences_parsed", "words_parsed",
                 "files_read") + tuple(f"rejected_{r}" for r in sentences.REASONS):
        totals.setdefault(name, 0)
    return totals
