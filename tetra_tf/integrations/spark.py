r"""Parsing on Apache Spark: parse columns for a DataFrame of sentences, and the reading of
text files into one (`python -m tetra_tf.spark_parse` is the command line).

Example:
    ```python
    from tetra_tf.integrations import spark as tetra_spark

    parsed = tetra_spark.parse_column(df, "models/tetra/1", text_column="sentence")
    # df's columns, then tree (one-line bracketed tree), score (its log-probability),
    # reason and error (why a row was refused; null for a parsed row)
    ```

With ``marginals=True`` the rows also get ``tree_probability`` (the tree's probability
among all valid trees) and ``constituent_marginals`` (each constituent's probability, in
the order the tree string opens their brackets), after score, from
`Parser.parse_each(marginals=True)`; both null for a refused row. With
``span_marginals=p`` (a floor from 0 to 1, implying marginals) they also get, after those,
``span_marginals``: every labelled span, in the tree or not, whose probability is at least
p, as array<struct<label: string, start: int, end: int, probability: double>> (start and
end: first and last word, 0-based, inclusive), in `Parser.parse_each(span_marginals=p)`'s
order (by start, end, label); null for a refused row.

The sentence contract is `tetra_tf.contract.sentences`': a row's text becomes words with
`sentences.text_to_words` (or it is refused with one of `sentences.REASONS`); the model
refuses a sentence alone with a reason too. Each row gets exactly one of (tree, score) and
(reason, error). A row whose `reason` is already set (a line the reader refused) is passed
through unparsed.

How it runs: `DataFrame.mapInArrow` hands each Python worker its partition's rows in Arrow
batches (at most spark.sql.execution.arrow.maxRecordsPerBatch rows, 10,000 by default);
`Parser.parse_each` sorts each batch's sentences by length and parses them in model calls of
`batch_size`, shortest together. The `Parser` is cached in this module, keyed by model
directory: with Spark's Python worker reuse (spark.python.worker.reuse, on by default) the
model is loaded once per Python worker process, not per task or per batch (a cache in a
function pickled from ``__main__`` would be reloaded for every task). Every load is counted
in `loads` (an accumulator of (host, pid, seconds)) and reported on the worker's stderr.
Each worker's TensorFlow uses the task's cores (spark.task.cpus), not the whole machine's.
`warm_workers` starts the loads before the input is read (`spark_parse.run` calls it).
A model failure (anything but a refused sentence) fails the task, and so, after Spark's
retries, the job: it does not turn every row into an error row.

Files: `read_files` reads text files (plain, or .gz/.bz2/.xz/.lzma/.zst by extension) with
`SparkContext.binaryFiles`, each file whole by one task, so line numbers are exact; its
lines go through `sentences.read_lines`, so a damaged compressed file gives its readable
lines, then one `damaged` row where the damage starts. `write_ordered` brings each file's
rows, in line order, to `bulk_options.OrderedWriter` (the ordered output Beam writes too).
"""

from __future__ import annotations

import io
import itertools
import logging
import os
import socket
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from tetra_tf import cpu, packaged_models
from tetra_tf.contract import export_format, parse_record, sentences
from tetra_tf.contract import text as text_lib
from tetra_tf.contract.export_format import DEFAULT_BATCH_SIZE
from tetra_tf.integrations import bulk_options

if TYPE_CHECKING:  # pyspark and TensorFlow are imported where they are used
    import pyarrow as pa
    from pyspark import Accumulator, SparkContext
    from pyspark.sql import DataFrame, SparkSession

    from tetra_tf.parser import Parser

# The columns `parse_column` adds (replacing any of the same names, except a set reason);
# every name is `parse_record`'s, the same as in Beam's records and the parse command's JSON.
TREE, SCORE, REASON, ERROR = (parse_record.TREE, parse_record.SCORE, parse_record.REASON,
                              parse_record.ERROR)
PARSE_COLUMNS = (TREE, SCORE, REASON, ERROR)
"""The columns `parse_column` adds, in this order: ``tree`` (string), ``score`` (double),
``reason`` (string) and ``error`` (string)."""
# With marginals, after score.
TREE_PROBABILITY, CONSTITUENT_MARGINALS = (parse_record.TREE_PROBABILITY,
                                           parse_record.CONSTITUENT_MARGINALS)
MARGINALS_COLUMNS = (TREE_PROBABILITY, CONSTITUENT_MARGINALS)
"""The columns `parse_column(marginals=True)` adds after ``score``: ``tree_probability``
(double) and ``constituent_marginals`` (array<double>)."""
# With span_marginals, after those.
SPAN_MARGINALS = parse_record.SPAN_MARGINALS
# The fields of each span (`parse_record.span_records`') and their Spark types.
_SPAN_FIELDS = (("label", "string"), ("start", "int"), ("end", "int"),
                ("probability", "double"))
SPAN_MARGINALS_TYPE = ("array<struct<"
                       + ",".join(f"{name}:{kind}" for name, kind in _SPAN_FIELDS) + ">>")
"""The type of the column `parse_column(span_marginals=p)` adds after `MARGINALS_COLUMNS`,
``span_marginals`` (Spark's simple string; the fields are `parse_record.span_records`')."""
# The rows `read_files` makes: one per input line.
FILE, LINE, SENTENCE = parse_record.FILE, parse_record.LINE, "sentence"
LINES_SCHEMA = "file string, line long, sentence string, reason string, error string"
"""The schema of `read_files`' rows (a Spark DDL string): one row per input line."""
# With documents: a row per sentence of a line, its number in the line and its offsets.
SENTENCE_NUMBER, START, END = (parse_record.SENTENCE_NUMBER, parse_record.START,
                               parse_record.END)
DOCUMENTS_SCHEMA = ("file string, line long, sentence_number long, start long, `end` long, "
                    "sentence string, reason string, error string")
"""The schema of `read_files(documents=True)`' rows: one per sentence of each line (a line
the reader refuses: one row, its sentence_number, start and end null)."""

# Each Python worker logs its loads on its stderr (the executor's log), as
# "tetra_tf.integrations.spark: MESSAGE" (`_log_on_stderr`).
_log = logging.getLogger(__name__)


class _StderrHandler(logging.StreamHandler):
    """Writes "LOGGER: MESSAGE" to sys.stderr as it is when a record comes."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass  # always the current sys.stderr


def _log_on_stderr() -> None:
    """Gives this module's log a stderr handler at INFO where nothing would handle its
    records (a Spark Python worker configures no logging); else leaves logging alone."""
    if not _log.hasHandlers():
        _log.addHandler(_StderrHandler())
        _log.setLevel(logging.INFO)


# This Python worker's parsers by model directory; the threads loading one ahead of the
# parse (`warm_workers`); the loads not yet added to a `loads` accumulator.
_parsers: dict[str, "Parser"] = {}
_parsers_lock = threading.Lock()
_warming: dict[str, threading.Thread] = {}
_unreported_loads: dict[str, list] = {}


# --------------------------------------------------------------------------------------
# Loading the model: once per Python worker process


class LoadsParam:
    """The AccumulatorParam of `loads_accumulator`: lists of (host, pid, seconds), joined.

    It follows pyspark.AccumulatorParam's protocol (``zero`` and ``addInPlace``) without
    subclassing it, so that importing this module does not need pyspark.
    """

    # pyspark.AccumulatorParam's protocol (not subclassed: importing this module must not
    # need pyspark).
    @staticmethod
    def zero(value: list) -> list:
        """The accumulator's starting value on a worker.

        Args:
          value: the accumulator's initial value (ignored).

        Returns:
          A new empty list.
        """
        del value
        return []

    @staticmethod
    def addInPlace(value1: list, value2: list) -> list:  # noqa: N802 - pyspark's name
        """Adds one list of loads to another (pyspark's name for the operation).

        Args:
          value1: the loads so far; extended in place.
          value2: the loads to add.

        Returns:
          value1, with value2's loads appended.
        """
        value1.extend(value2)
        return value1


def loads_accumulator(context: "SparkContext") -> "Accumulator":
    """An accumulator counting the model loads of `parse_column`'s workers.

    Each Python worker process that loads the model adds one ``(host, pid, seconds)`` tuple
    (its host name, its process id, the load's wall-clock seconds) when it first parses,
    a load `warm_workers` started included. Read ``.value`` on the driver after an action.

    Args:
      context: the session's SparkContext (``session.sparkContext``).

    Returns:
      A pyspark Accumulator whose value is a list of (host, pid, seconds), empty at first
      (`LoadsParam`); pass it to `parse_column` as ``loads``.
    """
    return context.accumulator([], LoadsParam())


def task_cpus() -> int | None:
    """The cores Spark gave the running task (spark.task.cpus), to size TensorFlow by.

    Returns:
      The running task's cores (``TaskContext.cpus()``); None outside a Spark task (on the
      driver, in a plain process) or where pyspark is not installed.
    """
    try:
        from pyspark import TaskContext  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    context = TaskContext.get()
    return context.cpus() if context is not None else None


def _load(model_dir: str, cores: int | None, ahead: bool) -> None:
    """Loads model_dir's `Parser` into the cache; the caller holds `_parsers_lock`."""
    from tetra_tf import parser as parser_module  # pylint: disable=import-outside-toplevel

    start = time.perf_counter()
    calls = min(cores or parser_module.DEFAULT_CONCURRENT_CALLS,
                parser_module.DEFAULT_CONCURRENT_CALLS)
    # Spark runs a Python worker per task slot, each given spark.task.cpus cores: sized to
    # the machine, the workers' threads would contend (two 1-core workers side by side
    # parsed 5-14% faster with one thread each).
    sized = cpu.share_cores(calls, cores)
    _parsers[model_dir] = parser_module.Parser(model_dir, concurrent_calls=calls)
    seconds = time.perf_counter() - start
    host, pid = socket.gethostname(), os.getpid()
    _unreported_loads.setdefault(model_dir, []).append((host, pid, seconds))
    _log_on_stderr()
    _log.info("loaded the parser from %s in %.1f s (host %s, process %d; %s%s)", model_dir,
              seconds, host, pid, _cores_text(cores, sized),
              "; ahead of the parse" if ahead else "")


def _cores_text(cores: int | None, sized: bool) -> str:
    if not sized:
        return "TensorFlow's threads as they were"
    if not cores:
        return "TensorFlow's threads sized for the machine's cores"
    return f"{cores} core{'s' if cores != 1 else ''}"


def get_parser(model_dir: str, loads: "Accumulator | None" = None) -> "Parser":
    """The `Parser` of model_dir, loaded on the first call in this process and cached.

    The cache lives in this module, so with Spark's Python worker reuse the model is loaded
    once per worker process. Inside a Spark task, TensorFlow's threads and the parser's
    concurrent model calls are sized to the task's cores (see `cpu.share_cores`); elsewhere
    the parser's defaults apply. A load `warm_workers` began is waited for. Each load is
    logged (on the worker's stderr where its logging is not configured).

    Args:
      model_dir: the export's directory; the cache's key (the same export under another
        spelling of its path is loaded again).
      loads: a `loads_accumulator`; this process's load, not yet reported, is added to it
        the first time a call passes it. None (the default): not counted.

    Returns:
      The cached `tetra_tf.parser.Parser` of model_dir.

    Raises:
      tetra_tf.errors.ExportError: model_dir is not a usable tetra-tf export (nothing is
        cached; the next call tries again).
    """
    warming = _warming.get(model_dir)
    if warming is not None:
        warming.join()
    with _parsers_lock:
        if model_dir not in _parsers:
            _load(model_dir, task_cpus(), ahead=False)
        if loads is not None and _unreported_loads.get(model_dir):
            loads.add(_unreported_loads.pop(model_dir))
        return _parsers[model_dir]


def _load_ahead(model_dir: str, cores: int | None) -> None:
    with _parsers_lock:
        if model_dir not in _parsers:
            try:
                _load(model_dir, cores, ahead=True)
            except Exception as e:  # pylint: disable=broad-except
                _log_on_stderr()
                _log.warning("loading the parser from %s ahead of the parse failed (%s: %s); "
                             "the parse will load it", model_dir, type(e).__name__, e)


class _StartLoading:
    """mapInArrow's function: starts loading the parser on a thread of this Python worker;
    no rows."""

    def __init__(self, model_dir: str):
        self.model_dir = model_dir

    def __call__(self, batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        for _ in batches:
            pass
        with _parsers_lock:
            if self.model_dir not in _parsers and self.model_dir not in _warming:
                thread = threading.Thread(target=_load_ahead, daemon=True,
                                          args=(self.model_dir, task_cpus()))
                _warming[self.model_dir] = thread
                thread.start()
        return iter(())


def warm_workers(session: "SparkSession", model_dir: str | None = None) -> None:
    """Starts loading model_dir's parser in the cluster's Python workers, then returns.

    A quick task per core starts a thread in its Python worker that loads the parser. The
    tasks go through mapInArrow, as `parse_column`'s do, because Spark reuses a Python
    worker only for the same kind of job (an RDD job's workers are others): with worker
    reuse (spark.python.worker.reuse, the default), the parse tasks then find the model
    loaded, or being loaded, and TensorFlow's import and the model's loading overlap the
    reading of the input (`spark_parse.run` calls this first). Without reuse the loads are
    wasted. A load that fails here is logged; the parse task loads again and fails with it.

    Args:
      session: the active SparkSession; one task per core of its
        ``sparkContext.defaultParallelism`` (at least one) is run.
      model_dir: the model, as `parse_column` will be given it (the cache's key): a
        packaged model's name or an export's directory readable by every worker; None:
        the packaged default model.

    Raises:
      Exception: whatever Spark raises if the quick job itself fails (a worker that cannot
        start Python, say); a failed model load does not raise here.
    """
    model_dir = model_dir or packaged_models.DEFAULT_MODEL
    slots = max(1, session.sparkContext.defaultParallelism)
    with warnings.catch_warnings():  # mapInArrow passes Arrow batches: pandas is not used
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
        session.range(slots, numPartitions=slots).mapInArrow(
            _StartLoading(model_dir), "id long").collect()


def parse_columns(marginals: bool = False,
                  span_marginals: float | None = None) -> tuple[str, ...]:
    """The columns `parse_column` adds, in order.

    Args:
      marginals: as `parse_column`'s.
      span_marginals: as `parse_column`'s (only whether it is None counts).

    Returns:
      `PARSE_COLUMNS`; with marginals, `MARGINALS_COLUMNS` after ``score``; with
      span_marginals, those and `SPAN_MARGINALS` after them.
    """
    spans = span_marginals is not None
    return (TREE, SCORE, *(MARGINALS_COLUMNS if marginals or spans else ()),
            *((SPAN_MARGINALS,) if spans else ()), REASON, ERROR)


def parse_texts(parser: "Parser", texts: Sequence[str | None],
                batch_size: int = DEFAULT_BATCH_SIZE, max_words: int = 0, tokenize: bool = False,
                marginals: bool = False, span_marginals: float | None = None
                ) -> list[tuple | sentences.SentenceError]:
    """Parses texts with a parser, each failing alone: what `parse_column` does per batch.

    Each text becomes words with `sentences.text_to_words` (checked against the parser's
    `sentence_limits` lowered by max_words), then the accepted ones are parsed by
    `Parser.parse_each` in model calls of at most batch_size sentences.

    Args:
      parser: a `tetra_tf.parser.Parser` (e.g. `get_parser`'s).
      texts: one sentence per item: words separated by whitespace (PTB tokens), or raw
        text with tokenize; None is refused as ``empty`` ("no text (null)").
      batch_size: most sentences per model call (default `DEFAULT_BATCH_SIZE`, 64).
      max_words: a text of more words is refused (``too_many_words``); 0 (the default):
        only the export's own limit (``too_many_pieces``).
      tokenize: each text is raw: split it into PTB tokens (`tetra_tf.contract.text.ptb_tokenize`)
        instead of on whitespace. Default False.
      marginals: parse with `Parser.parse_each(marginals=True)` and give each parsed text
        its marginals too. Default False.
      span_marginals: a floor p from 0 to 1: parse with
        `Parser.parse_each(span_marginals=p)` and give each parsed text its marginals and
        every labelled span at or above p. Default None: none.

    Returns:
      One item per text, in input order: ``(tree, score)`` (the one-line bracketed tree,
      and its log-probability as a float; with marginals ``(tree, score,
      tree_probability, constituent_marginals)``, the last a list of floats, as
      `ParseResult` has them; with span_marginals ``(tree, score, tree_probability,
      constituent_marginals, span_marginals)``, the last a list of `parse_record.span_records`
      dicts), or the `sentences.SentenceError` refusing it:
      its ``reason`` is ``empty``, ``too_many_words`` or ``too_many_pieces`` from the
      contract, or what `Parser.parse_each` refuses alone (e.g. ``rejected``). A refused
      sentence is returned, never raised.

    Raises:
      tetra_tf.errors.ModelError: the model itself failed (see `Parser.parse_each`);
        inside `parse_column` this fails the task.
      ValueError: a negative max_words, or a batch_size below 1 or span_marginals outside
        0..1 (when a text is parsed).

    Example:
        ```python
        from tetra_tf.contract import sentences
        from tetra_tf.integrations import spark as tetra_spark
        from tetra_tf.parser import Parser

        parser = Parser("models/tetra/1")
        for result in tetra_spark.parse_texts(parser, ["The cat sat .", None, "   "]):
            if isinstance(result, sentences.SentenceError):
                print(result.reason, result.detail)   # empty no text (null), then empty
            else:
                tree, score = result
        ```
    """
    limits = parser.sentence_limits.lowered(max_words=max_words)
    split = text_lib.word_splitter(tokenize)
    results: list[Any] = [None] * len(texts)
    todo: list[int] = []
    words: list[list[str]] = []
    for index, text in enumerate(texts):
        if text is None:
            results[index] = sentences.SentenceError(sentences.EMPTY, "no text (null)")
            continue
        try:
            words.append(sentences.text_to_words(text, limits, split))
            todo.append(index)
        except sentences.SentenceError as e:
            results[index] = e
    if words:
        for index, result in zip(todo, parser.parse_each(words, batch_size, limits,
                                                         marginals=marginals,
                                                         span_marginals=span_marginals)):
            if isinstance(result, sentences.SentenceError):
                results[index] = result
                continue
            # tree, score, then the marginals and spans it was parsed with: the columns'
            # order (`parse_record.BULK_FIELDS`)
            values = tuple(parse_record.bulk_fields(result).values())
            results[index] = values
    return results


def _arrow_types() -> dict[str, "pa.DataType"]:
    """The Arrow type of each column `_ParsePartition` fills from a parse (`parse_column`'s
    Spark types)."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    kinds = {"string": pa.string(), "int": pa.int32(), "double": pa.float64()}
    span = pa.struct([(name, kinds[kind]) for name, kind in _SPAN_FIELDS])
    return {TREE: pa.string(), SCORE: pa.float64(), TREE_PROBABILITY: pa.float64(),
            CONSTITUENT_MARGINALS: pa.list_(pa.float64()), SPAN_MARGINALS: pa.list_(span)}


class _ParsePartition:
    """mapInArrow's function: Arrow batches of rows → the same rows with the parse columns."""

    def __init__(self, model_dir: str, text_column: str, batch_size: int, max_words: int,
                 tokenize: bool, loads: "Accumulator | None", marginals: bool = False,
                 span_marginals: float | None = None):
        self.model_dir, self.text_column = model_dir, text_column
        self.batch_size, self.max_words, self.tokenize = batch_size, max_words, tokenize
        self.loads, self.marginals = loads, marginals
        self.span_marginals = span_marginals

    def __call__(self, batches: Iterable["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa  # pylint: disable=import-outside-toplevel

        for batch in batches:
            names = batch.schema.names
            texts = batch.column(names.index(self.text_column)).to_pylist()
            given = (batch.column(names.index(REASON)).to_pylist() if REASON in names
                     else [None] * len(texts))
            given_errors = (batch.column(names.index(ERROR)).to_pylist() if ERROR in names
                            else [None] * len(texts))
            todo = [i for i, reason in enumerate(given) if reason is None]
            # A parse's values (tree, score[, tree_probability, constituent_marginals[,
            # span_marginals]]) by row; None for a row not parsed.
            parses: list[tuple | None] = [None] * len(texts)
            reasons, errors = list(given), list(given_errors)
            if todo:
                parser = get_parser(self.model_dir, self.loads)
                parsed = parse_texts(parser, [texts[i] for i in todo], self.batch_size,
                                     self.max_words, self.tokenize, self.marginals,
                                     self.span_marginals)
                for index, result in zip(todo, parsed):
                    if isinstance(result, sentences.SentenceError):
                        reasons[index], errors[index] = result.reason, result.detail
                    else:
                        parses[index] = result
            columns = parse_columns(self.marginals, self.span_marginals)
            arrow_types = _arrow_types()
            values = [pa.array([None if row is None else row[i] for row in parses],
                               arrow_types[name])
                      for i, name in enumerate(columns) if name not in (REASON, ERROR)]
            kept = [name for name in names if name not in columns]
            yield pa.RecordBatch.from_arrays(
                [batch.column(names.index(name)) for name in kept] + values
                + [pa.array(reasons, pa.string()), pa.array(errors, pa.string())],
                names=kept + list(columns))


def parse_column(df: "DataFrame", model_dir: str | None = None, text_column: str = SENTENCE,
                 batch_size: int = DEFAULT_BATCH_SIZE, max_words: int = 0,
                 tokenize: bool = False, loads: "Accumulator | None" = None,
                 marginals: bool = False, span_marginals: float | None = None
                 ) -> "DataFrame":
    """df with the parse of its text_column: tree, score, reason, error (see the module doc);
    with marginals also tree_probability and constituent_marginals; with span_marginals
    those and span_marginals.

    Lazy, as any DataFrame transformation: nothing is parsed (and model_dir is not read)
    until an action runs. Each Python worker loads the model once (`get_parser`); each
    Arrow batch's rows are parsed by `parse_texts`. A refused sentence is never raised: it
    becomes an error row. When an action runs, a model that fails to load
    (`tetra_tf.errors.ExportError`) or fails itself (`tetra_tf.errors.ModelError`) fails the
    task, and after Spark's retries the action raises Spark's own error (e.g.
    pyspark.errors.PythonException) naming it.

    Args:
      df: one sentence per row in text_column (words separated by whitespace, PTB tokens;
        raw text with tokenize). A row whose ``reason`` column is already set (such as a
        line `read_files` refused) is passed through unparsed, its reason and error kept.
      model_dir: a packaged model's name (every worker has tetra-tf installed), or an
        export at a path every worker reads (local, gs://, ...); None (the default): the
        packaged default model (`tetra_tf.packaged_models.DEFAULT_MODEL`).
      text_column: the string column holding the sentences (default ``sentence``, as
        `read_files` names it).
      batch_size: most sentences per model call (default `DEFAULT_BATCH_SIZE`, 64).
      max_words: a sentence of more words is refused (``too_many_words``); 0 (the default):
        only the export's limit (``too_many_pieces``).
      tokenize: the texts are raw: split them into PTB tokens
        (`tetra_tf.contract.text.ptb_tokenize`) instead of on whitespace. Default False.
      loads: a `loads_accumulator`, to count the model loads; None (the default): not
        counted.
      marginals: also give each row ``tree_probability`` and ``constituent_marginals``
        (from `Parser.parse_each(marginals=True)`); a sentence longer than the export's
        parse_marginals signature takes is then refused (``too_many_words``). Default
        False.
      span_marginals: a floor p from 0 to 1: also give each row ``span_marginals``, every
        labelled span whose probability is at least p (from
        `Parser.parse_each(span_marginals=p)`), and the marginals; a sentence of more than
        the export's parse_span_marginals bound (256 words) is then refused
        (``too_many_words``). Default None: none.

    Returns:
      A DataFrame of the same rows: df's columns (any of its own columns named as the
      ones added, `parse_columns`, dropped), then ``tree`` (string: the one-line bracketed
      tree), ``score`` (double: its log-probability, ≤ 0), with marginals
      ``tree_probability`` (double: the tree's probability among all valid trees) and
      ``constituent_marginals`` (array<double>: each constituent's probability, in the
      order the tree string opens their brackets, the root's and the parts of speech'
      left out; `ParseResult.constituent_marginals`), with span_marginals also
      ``span_marginals`` (`SPAN_MARGINALS_TYPE`: array<struct<label: string, start: int,
      end: int, probability: double>>, `ParseResult.span_marginals` in its order),
      ``reason`` (string: one of `sentences.REASONS`) and ``error`` (string: the refusal's
      detail, without the ``reason: `` prefix). A parsed row has tree and score (and the
      marginals and spans), with
      reason and error null; a refused row the reverse. Reasons the parse gives:
      ``empty`` (a null or blank text), ``too_many_words``, ``too_many_pieces``,
      ``rejected`` (the model refused it alone);
      rows passed through keep theirs (``not_utf8``, ``too_long``, ``damaged``, ... from
      `read_files`).

    Raises:
      ValueError: df has no text_column, or it is not a string column, or span_marginals
        is outside 0..1 or NaN (raised here, on the driver).

    Example:
        ```python
        from pyspark.sql import SparkSession
        from tetra_tf.integrations import spark as tetra_spark

        session = SparkSession.builder.getOrCreate()
        df = session.createDataFrame([(1, "The cat sat ."), (2, "")], "id long, text string")
        parsed = tetra_spark.parse_column(df, "/models/tetra/1", text_column="text")
        parsed.select("id", "tree", "score", "reason").show(truncate=False)
        # id 1: its tree and score; id 2: reason empty (tree and score null)
        ```
    """
    from pyspark.sql.types import (  # pylint: disable=import-outside-toplevel
        ArrayType, DoubleType, IntegerType, StringType, StructField, StructType)

    if span_marginals is not None:
        export_format.check_span_floor(span_marginals)
    if text_column not in df.columns:
        raise ValueError(f"no column {text_column!r} (columns: {', '.join(df.columns)})")
    column_type = df.schema[text_column].dataType
    if not isinstance(column_type, StringType):
        raise ValueError(f"column {text_column!r} is {column_type.simpleString()}, not string")
    columns = parse_columns(marginals, span_marginals)
    kinds = {"string": StringType(), "int": IntegerType(), "double": DoubleType()}
    span = StructType([StructField(name, kinds[kind]) for name, kind in _SPAN_FIELDS])
    types = {TREE: StringType(), SCORE: DoubleType(), TREE_PROBABILITY: DoubleType(),
             CONSTITUENT_MARGINALS: ArrayType(DoubleType()), SPAN_MARGINALS: ArrayType(span),
             REASON: StringType(), ERROR: StringType()}
    fields = [field for field in df.schema.fields if field.name not in columns]
    schema = StructType(fields + [StructField(name, types[name]) for name in columns])
    with warnings.catch_warnings():  # mapInArrow passes Arrow batches: pandas is not used
        warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
        return df.mapInArrow(_ParsePartition(model_dir or packaged_models.DEFAULT_MODEL,
                                             text_column, batch_size, max_words,
                                             tokenize, loads, marginals, span_marginals),
                             schema)


# --------------------------------------------------------------------------------------
# Reading files


class _ReadFile:
    """binaryFiles' (path, bytes) → one row per line: (file, line, sentence, reason, error);
    with documents, one per sentence of a line: (file, line, sentence_number, start, end,
    sentence, reason, error)."""

    def __init__(self, limits: sentences.SentenceLimits, tokenize: bool,
                 documents: bool = False):
        self.limits, self.tokenize, self.documents = limits, tokenize, documents

    def __call__(self, item: tuple[str, bytes]) -> Iterator[tuple]:
        path, data = item
        stream = sentences.decompressed(io.BytesIO(data), path)
        split = text_lib.word_splitter(self.tokenize)
        for line in sentences.read_lines(stream, self.limits, split, self.documents):
            if line.error is not None:
                place = (None, None, None) if self.documents else ()
                yield (path, line.number, *place, None, line.error.reason, line.error.detail)
            elif not self.documents:
                yield (path, line.number, " ".join(line.words or []), None, None)
            else:
                yield from self._document(path, line)

    def _document(self, path: str, line: sentences.Line) -> Iterator[tuple]:
        """A document line's sentences, each checked as a line of words is."""
        checked = text_lib.checked_document(line.text, self.limits)
        for index, (sentence, error) in enumerate(checked, start=1):
            place = (path, line.number, index, sentence.start, sentence.end)
            if error is not None:
                yield (*place, None, error.reason, error.detail)
            else:
                yield (*place, " ".join(sentence.words), None, None)


def read_files(session: "SparkSession", paths: Sequence[str], max_words: int = 0,
               max_line_bytes: int = sentences.DEFAULT_MAX_LINE_BYTES,
               tokenize: bool = False, partitions: int = 0,
               documents: bool = False) -> "DataFrame":
    """The lines of text files as rows (LINES_SCHEMA): a sentence, or a reader's refusal.

    Each file (plain, or .gz, .bz2, .xz, .lzma, .zst by extension; .zst needs the zstandard
    package) is read whole by one task with `SparkContext.binaryFiles`, its lines by
    `sentences.read_lines`, so line numbers are exact. Lazy: the files are read when an
    action runs (a path that matches no file then fails it, with Spark's own error).

    Args:
      session: the active SparkSession.
      paths: files, folders or globs Spark reads (Hadoop paths: local, hdfs://, s3a://, ...).
      max_words: a line of more words is refused (``too_many_words``); 0 (the default): no
        limit here (the export's is applied by `parse_column`).
      max_line_bytes: a line of more bytes is refused (``too_long``) without being held
        whole; default `sentences.DEFAULT_MAX_LINE_BYTES` (1 MiB).
      tokenize: each line is raw text: split it into PTB tokens
        (`tetra_tf.contract.text.ptb_tokenize`); the ``sentence`` column then holds the
        tokens. Default False.
      partitions: the lines are spread over this many partitions (0, the default: 4 per
        core of ``defaultParallelism``).
      documents: each line is a document of raw text, split into sentences and PTB tokens
        (`tetra_tf.contract.text`): the rows are `DOCUMENTS_SCHEMA`'s, one per sentence, with its
        ``sentence_number`` in the line (from 1), ``start`` and ``end`` (its character
        offsets in the line) and its tokens in ``sentence``; a blank line has none.
        Default False.

    Returns:
      A DataFrame of `LINES_SCHEMA` (with documents `DOCUMENTS_SCHEMA`: a row per sentence,
      as above, and one per refused line), one row per input line: ``file`` (string: the path as
      Spark names it, e.g. ``file:/data/in.txt``), ``line`` (long: from 1), ``sentence``
      (string: the line's words joined by single spaces), ``reason`` and ``error``
      (strings: null for a line to parse; else one of `sentences.REASONS` (``empty``,
      ``not_utf8``, ``too_long``, ``damaged``, ``too_many_words``) and the refusal's detail,
      with sentence null). A damaged compressed file gives its readable lines, then one
      ``damaged`` row where the damage starts. An empty file gives no rows.

    Raises:
      ValueError: a negative max_words.

    Example:
        ```python
        from tetra_tf.integrations import spark as tetra_spark

        lines = tetra_spark.read_files(session, ["/data/corpus/*.txt.gz"], max_words=400)
        parsed = tetra_spark.parse_column(lines, "/models/tetra/1")   # its sentence column
        parsed.write.parquet("/data/trees")
        ```
    """
    context = session.sparkContext
    limits = sentences.SentenceLimits(max_line_bytes=max_line_bytes).lowered(
        max_words=max_words)
    partitions = partitions or 4 * context.defaultParallelism
    # Files are never split: more partitions only means fewer files read by each task.
    files = context.binaryFiles(",".join(paths), minPartitions=partitions)
    lines = session.createDataFrame(files.flatMap(_ReadFile(limits, tokenize, documents)),
                                    DOCUMENTS_SCHEMA if documents else LINES_SCHEMA)
    return lines.repartition(partitions)


# --------------------------------------------------------------------------------------
# Writing each file's trees in input order (the files are `bulk_options.OrderedWriter`'s)


def input_files(session: "SparkSession", paths: Sequence[str]) -> list[str]:
    """The files `read_files` reads for these paths, to give `write_ordered` every one.

    Listed on the JVM without reading the files, with empty files included (which have no
    rows in `read_files`' output).

    Args:
      session: the active SparkSession.
      paths: the paths given to `read_files`.

    Returns:
      The files' paths, sorted, as `read_files`' ``file`` column names them.

    Raises:
      Exception: Spark's own error (a Py4J error) for a path that matches no file.
    """
    # pylint: disable=protected-access
    return sorted(session.sparkContext._jsc.binaryFiles(",".join(paths), 1).keys().collect())


class _WriteOrdered:
    """mapPartitions' function: rows (file, line, tree) sorted by file and line → one file per
    input file, a tree or an empty line per line; yields the input files written."""

    def __init__(self, writer: bulk_options.OrderedWriter):
        self.writer = writer

    def __call__(self, rows: Iterable[tuple]) -> Iterator[str]:
        for file, file_rows in itertools.groupby(rows, key=lambda row: row[0]):
            self.writer.write(file, ((line, tree) for _, line, tree in file_rows))
            yield file


def write_ordered(results: "DataFrame", folder: str, files: Sequence[str]) -> list[str]:
    """Writes each input file's trees in input order (the ordered output, --ordered).

    Into `folder`, one ``.trees`` file per input file (its path below the input files'
    common folder, see `bulk_options.OrderedWriter`): a tree or, for a refused line, an
    empty line per input line; one task per group of files (at most 64 tasks), and an empty
    file for each input file without rows.

    Args:
      results: rows with ``file``, ``line`` and ``tree`` (null for a refused line), every
        line of each file exactly once (e.g. `parse_column` of `read_files`).
      folder: where the files go: a qualified path every executor writes to the same
        (``file:/...``, ``hdfs://...``), not a relative one.
      files: every input file (`input_files`).

    Returns:
      The input files, sorted: those given and those with rows.

    Raises:
      Exception: Spark's error for a failed write task; its cause is the writer's
        RuntimeError when a file's line is missing or comes twice in results.
    """
    writer = bulk_options.OrderedWriter(folder, bulk_options.common_folder(files))
    written = set(results.select(FILE, LINE, TREE)
                  .repartition(max(1, min(len(files), 64)), FILE)
                  .sortWithinPartitions(FILE, LINE)
                  .rdd.map(tuple).mapPartitions(_WriteOrdered(writer)).collect())
    for file in files:
        if file not in written:
            writer.write(file, [])
    return sorted(set(files) | written)
