r"""Parses a corpus with an Apache Beam pipeline: a tree per line, dead letters for the rest.

  python -m tetra_tf.beam_parse [--model_dir=NAME|EXPORT] --input='corpus/*.txt' \
      --output=out/trees [--tokenize | --documents] [--max_words=400] [--max_line_bytes=N]
      [--ordered] [--marginals] [--span_marginals=P] [Beam pipeline options]

Input: files or globs (--input may be repeated; .gz and other compressions by extension),
one sentence per line, PTB tokens separated by whitespace (or raw text with --tokenize), as
for `python -m tetra_tf.parse` (both read and check lines with tetra_tf.contract.sentences: the same
bad lines, the same reasons). A damaged compressed file keeps its readable lines and gives
one `damaged` dead letter where the damage starts. A line over --max_line_bytes is skipped
without being held, except that Beam's own reader inflates a .deflate file 16 MiB of
compressed input at a time. Output, sharded as Beam writes it:

  OUTPUT-SSSSS-of-NNNNN.jsonl         {"file", "line", "tree", "score"} per parsed line
  OUTPUT-errors-SSSSS-of-NNNNN.jsonl  {"file", "line", "reason", "error"} per rejected line
                                      (reason: a code of tetra_tf.contract.sentences: empty,
                                      not_utf8, too_long, damaged, too_many_words,
                                      too_many_pieces, rejected)
  OUTPUT-ordered/PATH.trees           with --ordered: per input file (PATH below the input
                                      files' common folder), one tree per line in input
                                      order, an empty line for a rejected one (an empty file
                                      for an input file without lines)

With --marginals each parsed record also has "tree_probability" (the tree's probability
among all valid trees) and "constituent_marginals" (each constituent's probability, in the
order the tree opens their brackets), as Parser.parse_each(marginals=True) gives them.
With --span_marginals=P (a floor from 0 to 1; implies --marginals) each parsed record also
has "span_marginals": every labelled span, in the tree or not, whose probability is at
least P, [{"label", "start", "end", "probability"}, ...] (start and end: first and last
word, 0-based, inclusive; by start, end, label), as Parser.parse_each(span_marginals=P)
gives them; a sentence of more than 256 words is then a too_many_words dead letter.

With --documents each line is a document of raw text, split into sentences (tetra_tf.contract.text,
as `python -m tetra_tf.parse --documents` splits it): each sentence is a record or a dead
letter of its own, with "sentence_number" (in the line, from 1), "start" and "end" (its
character offsets in the line); a blank line has none (not with --ordered).

Every input line (with --documents, every sentence) is in exactly one of the first two. The pipeline's counters are printed at
the end. Any other --flag is a Beam pipeline option (--runner, --direct_num_workers,
--project, ...). Without --runner it runs on this machine with FnApiRunner (Beam 2.77's
DirectRunner first tries the Prism runner, which downloads a binary);
--direct_num_workers=N --direct_running_mode=multi_processing runs N worker processes.

Exit codes: 0 the pipeline finished (rejected lines are in the dead letters); 1 the
pipeline failed (e.g. the model itself failed: one error line); 2 usage error (bad flags,
no model, an input that matches no file).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

# TensorFlow's C++ notices and Beam's import-time warnings (e.g. no GCP libraries) are
# noise here; pipeline failures are reported from their exceptions.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from tetra_tf import cli, extras  # noqa: E402
from tetra_tf.cli import UsageError  # noqa: E402
from tetra_tf.contract import sentences
from tetra_tf.integrations import bulk_options

LOCAL_RUNNER = "FnApiRunner"


# The common options of the bulk programs (tetra_tf/integrations/bulk_options.py) this program has.
BULK_OPTIONS = ("model_dir", "corpus_input", "corpus_output", "tokenize", "documents",
                "max_words", "max_line_bytes", "batch_size", "ordered", "marginals",
                "span_marginals")


def _parser() -> argparse.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="python -m tetra_tf.beam_parse", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    bulk_options.add_argparse_arguments(parser, BULK_OPTIONS)
    return parser


def unknown_pipeline_args(args: list[str]) -> list[str]:
    """The args that are no Beam pipeline option (Beam itself only warns about them)."""
    from apache_beam.options import pipeline_options  # pylint: disable=import-outside-toplevel

    # pylint: disable=protected-access
    parser = pipeline_options._BeamArgumentParser(allow_abbrev=False)
    seen = set()
    for cls in pipeline_options.PipelineOptions.__subclasses__():
        if str(cls) not in seen:
            seen.add(str(cls))
            cls._add_argparse_args(parser)  # pylint: disable=protected-access
    return parser.parse_known_args(args)[1]


def parse_args(argv: list[str]):
    """(ParseOptions, PipelineOptions) from the command line.

    Raises:
      UsageError: for bad or unknown flags, a missing model or an input matching no file.
    """
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
    from apache_beam.options.pipeline_options import (  # pylint: disable=import-outside-toplevel
        PipelineOptions, StandardOptions)

    from tetra_tf.integrations import beam  # pylint: disable=import-outside-toplevel

    args, rest = _parser().parse_known_args(argv)
    unknown = unknown_pipeline_args(rest)
    if unknown:
        raise UsageError(f"unknown arguments {' '.join(unknown)} (neither this program's "
                         "flags nor Beam pipeline options; see --help)")
    bulk_options.check(vars(args))
    for pattern in args.corpus_input:
        if not FileSystems.match([pattern])[0].metadata_list:
            raise UsageError(f"--input: {pattern} matches no file")
    pipeline_options = PipelineOptions(rest)
    if pipeline_options.view_as(StandardOptions).runner is None:
        pipeline_options.view_as(StandardOptions).runner = LOCAL_RUNNER
    options = beam.ParseOptions(
        model_dir=args.model_dir, inputs=args.corpus_input, output=args.corpus_output,
        tokenize=args.tokenize, documents=args.documents, max_words=args.max_words,
        max_line_bytes=args.max_line_bytes, batch_size=args.batch_size, ordered=args.ordered,
        marginals=args.marginals, span_marginals=args.span_marginals)
    return options, pipeline_options


def main(argv: list[str]) -> int:
    """Runs the pipeline as the flags say; `cli.run_argv` reports usage errors (exit 2)."""
    # Beam logs a failing bundle's traceback (20-30 lines) before raising it: the one-line
    # error below says what failed.
    logging.getLogger().setLevel(logging.ERROR)
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)
    extras.require("beam", "python -m tetra_tf.beam_parse")
    from tetra_tf.integrations import beam  # pylint: disable=import-outside-toplevel
    options, pipeline_options = parse_args(argv)
    try:
        totals = beam.run(options, pipeline_options)
    except Exception as e:  # pylint: disable=broad-except
        print(f"error: the pipeline failed: {_failure_summary(e)}", file=sys.stderr)
        return cli.EXIT_FAILURE
    rejected = sum(totals[f"rejected_{reason}"] for reason in sentences.REASONS)
    for name, value in sorted(totals.items()):
        print(f"{name:>25} {value}")
    parsed = (f"{totals['sentences_parsed']} sentences of {totals['lines_read']} lines parsed"
              if options.documents else
              f"{totals['sentences_parsed']} of {totals['lines_read']} lines parsed")
    print(f"{parsed} → "
          f"{options.output}-*{beam.RECORDS_SUFFIX}; {rejected} rejected → "
          f"{options.output}{beam.ERRORS_INFIX}-*{beam.RECORDS_SUFFIX}"
          + (f"; in input order → {bulk_options.ordered_folder(options.output)}/"
             if options.ordered else ""))
    return cli.EXIT_OK


def _failure_summary(error: Exception) -> str:
    """One line for a failed pipeline: the model's own failure when that was the cause
    (Beam wraps a worker's exception in its own, with the worker's traceback)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if "ModelError" in line or "the model failed" in line:
            return line[:300]
    return f"{type(error).__name__}: {lines[-1][:300] if lines else ''}"


if __name__ == "__main__":
    cli.run_argv(main)
