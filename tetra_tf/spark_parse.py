r"""Parses text files on Apache Spark: a tree per line, an error row for every other line.

  python -m tetra_tf.spark_parse [--model_dir=NAME|EXPORT] --input='corpus/*.txt' \
      --output=out/trees [--master=spark://HOST:7077] [--format=parquet|json] [--ordered]
      [--tokenize | --documents] [--max_words=N] [--max_line_bytes=N] [--batch_size=64]
      [--partitions=N] [--marginals] [--span_marginals=P]

Input: files, folders or globs as Spark reads them (local paths, hdfs://, s3a://, gs:// with
the cluster's connectors; --input may be repeated), one sentence per line, PTB tokens
separated by whitespace (raw text with --tokenize); .gz, .bz2 and .xz files are decompressed
by extension. Each file is read whole by one task (so line numbers are exact; a file must
fit in a worker's memory), its lines split and checked by `tetra_tf.contract.sentences.read_lines`
(the same reasons as every other way in), then spread over --partitions partitions.

Output: --output is a Parquet (default) or JSON-lines dataset with a row per input line:
``file``, ``line`` (1-based), then ``tree`` and ``score`` for a parsed line, or ``reason``
(empty, not_utf8, too_long, too_many_words, too_many_pieces, damaged, rejected) and
``error`` for a refused one (in JSON the absent fields are left out, so records are those of
`tetra_tf.beam_parse`). Every input line (with --documents, every sentence and every
refused line) is in it exactly once; a damaged compressed file
gives its readable lines and one ``damaged`` row at the line where the damage starts.
With --documents each line is a document of raw text, split into sentences (tetra_tf.contract.text,
as `python -m tetra_tf.parse --documents` splits it): a row per sentence, with
``sentence_number`` (in the line, from 1), ``start`` and ``end`` (its character offsets in
the line) after ``line``; a blank line has none, a refused line one row without them (not
with --ordered).
With --marginals a row also has ``tree_probability`` (double: the tree's probability among
all valid trees) and ``constituent_marginals`` (array of doubles: each constituent's
probability, in the order the tree opens their brackets) after ``score``, null for a
refused line, as Parser.parse_each(marginals=True) gives them.
With --span_marginals=P (a floor from 0 to 1; implies --marginals) a row also has, after
those, ``span_marginals`` (array of structs label (string), start, end (int: first and last
word, 0-based, inclusive) and probability (double)): every labelled span, in the tree or
not, whose probability is at least P, by start, end, label, as
Parser.parse_each(span_marginals=P) gives them; null for a refused line. A sentence of more
than 256 words is then refused (too_many_words).
With --ordered, also OUTPUT-ordered/PATH.trees per input file (PATH below the input files'
common folder): one tree per line in input order, an empty line for a refused one (an empty
file for an input file without lines).

Spark: --master is any Spark master URL (default local[*]: this machine, no cluster; run
by spark-submit, its --master); the module also runs as spark-submit's script;
--conf KEY=VALUE (repeatable) sets any Spark property. The model directory must be
readable by every worker (a shared or copied local path, gs://, ...). Each Python worker
process loads the model once. A failure of the model (not a refused sentence) fails the
job. The workers run the Python in PYSPARK_PYTHON (default: this one).

Exit codes: 0 every line is in the output (parsed or refused); 1 the job failed; 2 usage
error (bad flags, no model, an input that matches no file, an existing output).
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from absl import flags  # noqa: E402

from tetra_tf import cli, extras  # noqa: E402
from tetra_tf.contract import export_format, sentences
from tetra_tf.integrations import bulk_options

FORMATS = ("parquet", "json")
# The common options of the bulk programs (tetra_tf/integrations/bulk_options.py) this program has.
BULK_OPTIONS = ("model_dir", "corpus_input", "corpus_output", "ordered", "tokenize",
                "documents", "max_words", "max_line_bytes", "batch_size", "marginals",
                "span_marginals")
FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the flags (only when run as a program)."""
    bulk_options.define_absl_flags(BULK_OPTIONS)
    flags.DEFINE_string("master", "local[*]", "Spark master URL: local[N], spark://HOST:PORT, "
                        "yarn, ...")
    flags.DEFINE_enum("format", "parquet", list(FORMATS), "Output format.")
    flags.DEFINE_integer("partitions", 0, "Partitions the lines are spread over (0: 4 per "
                         "core of the cluster).")
    flags.DEFINE_multi_string("conf", [], "A Spark property KEY=VALUE; may be repeated.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing output.")


def _check_flags() -> dict[str, str]:
    """Checks what absl cannot; returns the --conf properties.

    Raises:
      cli.UsageError: naming the first problem.
    """
    if FLAGS.partitions < 0:
        raise cli.UsageError("--partitions must be 0 or more")
    conf = {}
    for item in FLAGS.conf:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise cli.UsageError(f"--conf {item!r}: expected KEY=VALUE")
        conf[key] = value
    bulk_options.check(bulk_options.absl_values(BULK_OPTIONS))  # last: it reads --model_dir
    return conf


def session(master: str | None, conf: dict[str, str]):
    """A SparkSession for parsing (quiet logs, TensorFlow quiet on the executors); master
    None: the one spark-submit set."""
    warnings.filterwarnings("ignore", message=".*PySpark does not yet fully support pandas")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession  # pylint: disable=import-outside-toplevel

    builder = SparkSession.builder if master is None else SparkSession.builder.master(master)
    builder = (builder.appName("tetra_tf.spark_parse")
               .config("spark.executorEnv.TF_CPP_MIN_LOG_LEVEL", "3")
               .config("spark.ui.showConsoleProgress", "true"))
    if "spark.driver.extraJavaOptions" not in conf:  # the driver's own logs: errors are
        # reported in one line from the job's exception; the progress bar stays
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile=file:{_quiet_log4j()}")
    for key, value in conf.items():
        builder = builder.config(key, value)
    logging.getLogger("py4j").setLevel(logging.ERROR)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


_QUIET_LOG4J = """\
rootLogger.level = off
logger.spark.name = org.apache.spark
logger.spark.level = off
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = off
logger.parquet.name = org.apache.parquet
logger.parquet.level = off
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _quiet_log4j() -> str:
    """A log4j2 configuration that keeps the driver JVM's log lines off the console."""
    path = os.path.join(tempfile.gettempdir(), "tetra_tf_spark_log4j2.properties")
    if not os.path.exists(path):
        with open(path + f".{os.getpid()}", "w", encoding="utf-8") as f:
            f.write(_QUIET_LOG4J)
        os.replace(path + f".{os.getpid()}", path)
    return path


def _hadoop_fs(spark, path: str):
    """(Hadoop FileSystem, Path) of a Spark path, through the driver's JVM."""
    # pylint: disable=protected-access
    hadoop_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path)
    configuration = spark.sparkContext._jsc.hadoopConfiguration()
    return hadoop_path.getFileSystem(configuration), hadoop_path


def check_paths(spark, inputs: list[str], outputs: list[str], overwrite: bool) -> None:
    """Raises cli.UsageError for an input matching no file or an existing output."""
    for pattern in inputs:
        fs, path = _hadoop_fs(spark, pattern)
        matched = fs.globStatus(path)
        if matched is None or len(matched) == 0:
            raise cli.UsageError(f"--input: {pattern} matches no file")
    if not overwrite:
        for output in outputs:
            fs, path = _hadoop_fs(spark, output)
            if fs.exists(path):
                raise cli.UsageError(f"--output: {output} exists (--overwrite replaces it)")


def run(spark, model_dir: str, inputs: list[str], output: str, output_format: str = "parquet",
        ordered: bool = False, tokenize: bool = False, max_words: int = 0,
        max_line_bytes: int = sentences.DEFAULT_MAX_LINE_BYTES,
        batch_size: int = export_format.DEFAULT_BATCH_SIZE,
        partitions: int = 0, overwrite: bool = False, documents: bool = False,
        marginals: bool = False, span_marginals: float | None = None) -> dict:
    """Reads, parses and writes (see the module doc); returns a summary: rows (lines, or
    with documents sentences and refused lines), parsed, refused by reason, model loads
    [(host, pid, seconds)], seconds, ordered files. With marginals the rows also have
    tree_probability and constituent_marginals, with span_marginals (a floor from 0 to 1)
    those and span_marginals (`tetra_spark.parse_column`'s). Raises ValueError for
    documents with ordered or span_marginals outside 0..1, before any work."""
    from tetra_tf.integrations import spark as tetra_spark  # noqa: PLC0415

    if documents and ordered:
        raise ValueError("ordered output is one tree per line: not with documents")
    if span_marginals is not None:
        export_format.check_span_floor(span_marginals)
    start = time.perf_counter()
    loads = tetra_spark.loads_accumulator(spark.sparkContext)
    tetra_spark.warm_workers(spark, model_dir)  # the model loads while the input is read
    lines = tetra_spark.read_files(spark, inputs, max_words, max_line_bytes, tokenize,
                                   partitions, documents)
    parsed = tetra_spark.parse_column(lines, model_dir, batch_size=batch_size, loads=loads,
                                      marginals=marginals, span_marginals=span_marginals)
    results = parsed.select(*output_columns(documents, marginals, span_marginals))
    writer = results.write.mode("overwrite" if overwrite else "errorifexists")
    if output_format == "json":
        writer.json(output)
    else:
        writer.parquet(output)
    written = read_output(spark, output, output_format, documents, marginals,
                          span_marginals)
    counts = collections.Counter({row[0]: row[1] for row in
                                  written.groupBy(tetra_spark.REASON).count().collect()})
    files = []
    if ordered:  # qualified here: a relative path would be relative to each executor
        fs, path = _hadoop_fs(spark, bulk_options.ordered_folder(output))
        files = tetra_spark.write_ordered(written, str(fs.makeQualified(path).toString()),
                                          tetra_spark.input_files(spark, inputs))
    refused = {reason: n for reason, n in counts.items() if reason is not None}
    return {"lines": sum(counts.values()), "parsed": counts.get(None, 0), "refused": refused,
            "loads": list(loads.value), "seconds": time.perf_counter() - start,
            "ordered_files": files}


def output_columns(documents: bool = False, marginals: bool = False,
                   span_marginals: float | None = None) -> list[str]:
    """The output's columns: file, line (with documents: sentence_number, start, end), tree,
    score (with marginals: tree_probability, constituent_marginals; with span_marginals
    those and span_marginals), reason, error."""
    from tetra_tf.integrations import spark as tetra_spark  # noqa: PLC0415

    place = [tetra_spark.SENTENCE_NUMBER, tetra_spark.START, tetra_spark.END] if documents \
        else []
    return [tetra_spark.FILE, tetra_spark.LINE, *place,
            *tetra_spark.parse_columns(marginals, span_marginals)]


def read_output(spark, output: str, output_format: str = "parquet", documents: bool = False,
                marginals: bool = False, span_marginals: float | None = None):
    """The dataset `run` wrote, as a DataFrame."""
    from tetra_tf.integrations import spark as tetra_spark  # noqa: PLC0415

    types = {"line": "long", "sentence_number": "long", "start": "long", "end": "long",
             "score": "double", "tree_probability": "double",
             "constituent_marginals": "array<double>",
             tetra_spark.SPAN_MARGINALS: tetra_spark.SPAN_MARGINALS_TYPE}
    schema = ", ".join(f"`{name}` {types.get(name, 'string')}"
                       for name in output_columns(documents, marginals, span_marginals))
    if output_format == "json":
        return spark.read.schema(schema).json(output)
    return spark.read.parquet(output)


def main(argv: list[str]) -> int:
    """Runs the job as the flags say; `cli.run` reports usage errors (2) and failures (1)."""
    del argv
    extras.require("spark", "python -m tetra_tf.spark_parse")
    conf = _check_flags()
    # Under spark-submit (which starts the JVM first), its --master stands unless --master
    # is given here too.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ and not FLAGS["master"].present
    spark = session(None if submitted else FLAGS.master, conf)
    try:
        ordered_dir = bulk_options.ordered_folder(FLAGS.output)
        check_paths(spark, FLAGS.input, [FLAGS.output] + ([ordered_dir] if FLAGS.ordered
                                                          else []), FLAGS.overwrite)
        try:
            summary = run(spark, FLAGS.model_dir, FLAGS.input, FLAGS.output, FLAGS.format,
                          FLAGS.ordered, FLAGS.tokenize, FLAGS.max_words,
                          FLAGS.max_line_bytes, FLAGS.batch_size, FLAGS.partitions,
                          FLAGS.overwrite, FLAGS.documents, FLAGS.marginals,
                          FLAGS.span_marginals)
        except Exception as e:  # pylint: disable=broad-except
            print(f"error: {_job_error(e)}", file=sys.stderr)
            return cli.EXIT_FAILURE
    finally:
        spark.stop()
    refused = sum(summary["refused"].values())
    processes = len({(host, pid) for host, pid, _ in summary["loads"]})
    rows = "sentences and lines" if FLAGS.documents else "lines"
    print(f"{summary['parsed']} of {summary['lines']} {rows} parsed, {refused} refused"
          + (" (" + ", ".join(f"{reason}: {n}" for reason, n in
                              sorted(summary["refused"].items())) + ")" if refused else "")
          + f" → {FLAGS.output} ({FLAGS.format}); model loaded {_times(len(summary['loads']))} "
          f"in {processes} worker process{'es' if processes != 1 else ''}; "
          f"{summary['seconds']:.1f} s"
          + (f"; in input order → {ordered_dir}/ ({len(summary['ordered_files'])} files)"
             if FLAGS.ordered else ""))
    return cli.EXIT_OK


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _job_error(error: Exception) -> str:
    """The most telling line of a (Py4J-wrapped) Spark job failure."""
    text = str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):  # the Python worker's own exception, if it reached us
        if ":" in line and not line.startswith(("at ", "File ", "...")) and (
                "Error" in line.split(":", 1)[0] or "Exception" in line.split(":", 1)[0]):
            return f"the Spark job failed: {line[:300]}"
    return f"the Spark job failed: {type(error).__name__}: {(lines or [''])[0][:300]}"


if __name__ == "__main__":
    define_flags()
    cli.run(main)
