"""Converts Penn Treebank trees to tetra-tag TFRecords, tag vocabularies and gold trees.

The library of `python -m tetra_tf.convert` (tetra_tf/convert.py, whose docstring is the
program's --help).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import shutil
import statistics
import sys
import time
from typing import Iterable, TextIO

import nltk
import tqdm
from absl import flags

from tetra_tf import cli as cli_lib
from tetra_tf.errors import InputError, TetraError
from tetra_tf.trees import tags as tags_lib
from tetra_tf.trees import treebank

PROGRAM = "convert_ptb.py"
TREES_FILE = "trees.txt"
MAX_DEPTH_CAP = 12  # Coverage is reported for stack depth caps 1..MAX_DEPTH_CAP.
MAX_SKIPPED_EXAMPLES = 100  # Skipped trees listed in the stats (all are counted).

MALFORMED = "malformed"
NO_WORDS = "no words after cleaning"
ROUNDTRIP_FAILURE = "roundtrip failure"
SKIP_REASONS = (MALFORMED, NO_WORDS, ROUNDTRIP_FAILURE)

VOCAB_FILES = (tags_lib.LEAF_VOCAB_FILE, tags_lib.INTERNAL_VOCAB_FILE, tags_lib.POS_VOCAB_FILE)


# Library parameter → the program flag that gives it, where their names differ.
FLAG_NAMES = {"input_path": "input", "stats_path": "stats"}


def _define_flags(flag_values: flags.FlagValues) -> None:
    """Defines the command line's flags in `flag_values`."""
    define = dict(flag_values=flag_values)
    flags.DEFINE_string(
        "input", None,
        "Treebank input: a file, a directory (all files in it, sorted) or a glob (quote it); "
        ".mrg files or one tree per line. Exclusive with --nltk_sample.", **define)
    flags.DEFINE_enum(
        "nltk_sample", None, sorted(treebank.NLTK_SAMPLE_SPLITS),
        "Read this split of the NLTK Penn Treebank sample instead of --input "
        f"(files wsj_NNNN.mrg: {treebank.NLTK_SAMPLE_SPLITS}); found via NLTK_DATA.", **define)
    flags.DEFINE_string(
        "output_dir", None,
        "Directory for the TFRecord shards, tag vocabularies and trees.txt (created if needed; "
        "old record shards in it are replaced).", **define)
    flags.DEFINE_string(
        "stats", None,
        "Write statistics as JSON to this file: counts read/written/skipped with reasons, "
        "unknown tags, stack depth histogram and coverage by depth cap, sentence lengths.",
        **define)
    flags.DEFINE_string(
        "vocab_from", None,
        "Reuse the tag vocabularies in this directory (e.g. the train split's output) instead "
        "of building them from the input; they are copied into --output_dir, and tags not in "
        "them are stored as id -1 and counted in the stats.", **define)
    flags.DEFINE_integer(
        "num_shards", 1, "Number of TFRecord shards; trees go to them in contiguous runs.",
        **define)


def _report(message: str, stream: TextIO | None) -> None:
    tqdm.tqdm.write(message, file=sys.stderr if stream is None else stream)


def _check_writable_directory(directory: str) -> None:
    """Creates `directory` if needed and checks that a file can be written in it."""
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".{PROGRAM}.probe")
        with open(probe, "w", encoding="utf-8"):
            pass
        os.remove(probe)
    except OSError as e:
        raise InputError(f"output directory {directory!r} is not writable: "
                         f"{e.strerror or e}") from None


def read_entries(input_path: str | None, nltk_sample: str | None):
    """Validates the input choice and returns (description, iterator of TreebankEntry)."""
    if input_path and nltk_sample:
        raise InputError("give either input_path or nltk_sample, not both",
                         ["input_path", "nltk_sample"])
    if not input_path and not nltk_sample:
        raise InputError("no input: give input_path=PATH_OR_GLOB or nltk_sample=train|dev|test",
                         ["input_path", "nltk_sample"])
    if nltk_sample:
        if nltk_sample not in treebank.NLTK_SAMPLE_SPLITS:
            raise InputError(f"unknown NLTK sample split {nltk_sample!r}; expected one of "
                             f"{', '.join(sorted(treebank.NLTK_SAMPLE_SPLITS))}")
        try:
            treebank.find_nltk_sample()
        except treebank.NltkSampleNotFoundError as e:
            raise InputError(str(e)) from None
        return f"NLTK sample {nltk_sample}", treebank.read_nltk_sample(nltk_sample)
    try:
        paths = treebank.treebank_files(input_path)
    except FileNotFoundError as e:
        raise InputError(str(e)) from None
    return f"{len(paths)} file(s) from {input_path}", treebank.read_treebank_files(paths)


def convert_entries(entries: Iterable[treebank.TreebankEntry],
                    vocabularies: tags_lib.TagVocabularies | None = None,
                    report: TextIO | None = None, progress: bool = True):
    """Cleans, tags and checks every entry.

    Args:
      entries: the raw trees read.
      vocabularies: reused vocabularies (for counting unknown tags), or None.
      report: where skipped trees are reported (file:line: reason); None for stderr.
      progress: show a tqdm progress bar (only on a terminal).

    Returns:
      (written, stats): the (TetraTags, tree line) pairs that passed, in input order, and
      the statistics of the run (see `run`).
    """
    written: list[tuple[tags_lib.TetraTags, str]] = []
    trees_read = 0
    skipped_reasons: collections.Counter = collections.Counter()
    skipped_examples: list[dict] = []
    depth_histogram: collections.Counter = collections.Counter()
    lengths: list[int] = []
    longest = None

    def skip(entry: treebank.TreebankEntry, reason: str, detail: str) -> None:
        skipped_reasons[reason] += 1
        if len(skipped_examples) < MAX_SKIPPED_EXAMPLES:
            skipped_examples.append({"source": entry.source, "line": entry.line,
                                     "reason": reason, "detail": detail})
        _report(f"{entry.source}:{entry.line}: skipped ({reason}): {detail}", report)

    for entry in tqdm.tqdm(entries, desc="converting", unit=" trees",
                           disable=None if progress else True):
        trees_read += 1
        if entry.error is not None:
            skip(entry, MALFORMED, entry.error)
            continue
        try:
            tree = treebank.clean_tree(entry.tree)
        except ValueError as e:
            skip(entry, MALFORMED, str(e))
            continue
        if len(tree) == 0:  # clean_tree drops every constituent left without words
            skip(entry, NO_WORDS, "the tree holds only empty elements")
            continue
        try:
            tetra_tags, tree_line = _tag_and_check(tree)
        except _RoundtripError as e:
            skip(entry, ROUNDTRIP_FAILURE, str(e))
            continue
        written.append((tetra_tags, tree_line))
        depth_histogram[tetra_tags.max_stack_depth()] += 1
        lengths.append(len(tetra_tags.words))
        if longest is None or len(tetra_tags.words) > longest["words"]:
            longest = {"source": entry.source, "line": entry.line,
                       "words": len(tetra_tags.words)}

    stats = {
        "trees_read": trees_read,
        "trees_written": len(written),
        "trees_skipped": {
            "count": sum(skipped_reasons.values()),
            "reasons": {reason: skipped_reasons[reason] for reason in SKIP_REASONS},
            "examples": skipped_examples,
        },
        "roundtrip_failures": skipped_reasons[ROUNDTRIP_FAILURE],
        "max_depth_histogram": {str(d): depth_histogram[d] for d in sorted(depth_histogram)},
        "coverage_by_depth_cap": {
            str(cap): (sum(c for d, c in depth_histogram.items() if d <= cap) / len(written)
                       if written else 0.0)
            for cap in range(1, MAX_DEPTH_CAP + 1)},
        "words": sum(lengths),
        "sentence_length": ({"min": min(lengths), "max": max(lengths),
                             "mean": round(statistics.fmean(lengths), 2),
                             "median": statistics.median(lengths)} if lengths else None),
        "longest_sentence": longest,
    }
    if vocabularies is not None:
        stats["unknown_tags"] = _unknown_tags([t for t, _ in written], vocabularies)
    return written, stats


class _RoundtripError(Exception):
    pass


def _tag_and_check(tree: nltk.Tree) -> tuple[tags_lib.TetraTags, str]:
    """Returns the tree's tags and one-line form, checking that both give the tree back.

    Raises:
      _RoundtripError: saying what failed.
    """
    try:
        tetra_tags = tags_lib.tree_to_tags(tree)
    except ValueError as e:
        raise _RoundtripError(f"cannot convert to tags: {e}") from None
    try:
        rebuilt = tags_lib.tags_to_tree(tetra_tags.words, tetra_tags.pos_tags,
                                        tetra_tags.leaf_tags, tetra_tags.internal_tags)
    except ValueError as e:
        raise _RoundtripError(f"tags do not convert back: {e}") from None
    # Iterative comparisons and reader: trees of any depth and width (nltk's recurse).
    if not treebank.trees_equal(rebuilt, tree):
        raise _RoundtripError("tags convert back to a different tree")
    line = treebank.tree_to_line(tree)
    try:
        reread = treebank.parse_tree(line)
    except ValueError:
        reread = None
    if reread is None or not treebank.trees_equal(reread, tree):
        raise _RoundtripError("the tree does not read back from its one-line form")
    return tetra_tags, line


def _unknown_tags(taggings: list[tags_lib.TetraTags],
                  vocabularies: tags_lib.TagVocabularies) -> dict:
    """Counts, per kind, the tag occurrences missing from reused vocabularies."""
    result = {}
    for kind, vocabulary, sequences in (
            ("leaf", vocabularies.leaf, [t.leaf_tags for t in taggings]),
            ("internal", vocabularies.internal, [t.internal_tags for t in taggings]),
            ("pos", vocabularies.pos, [t.pos_tags for t in taggings])):
        counts = collections.Counter(
            tag for sequence in sequences for tag in sequence if tag not in vocabulary)
        result[kind] = {"occurrences": sum(counts.values()),
                        "tags": dict(counts.most_common())}
    return result


def run(input_path: str | None = None, nltk_sample: str | None = None,
        output_dir: str | None = None, stats_path: str | None = None,
        vocab_from: str | None = None, num_shards: int = 1,
        report: TextIO | None = None, progress: bool = True) -> dict:
    """Runs the conversion (the command line's work) and returns its statistics.

    Returns:
      The statistics also written to `stats_path`: trees_read, trees_written, trees_skipped
      (count, reasons, examples), roundtrip_failures, max_depth_histogram,
      coverage_by_depth_cap, words, sentence_length, longest_sentence, unknown_tags (with
      `vocab_from`), vocab sizes, record_files and seconds.

    Raises:
      tetra_tf.errors.InputError: for an unusable input or option (found before anything
        but the output directory is created), in these parameters' words.
      RuntimeError: if no tree could be written (the statistics are still written).
    """
    start_time = time.monotonic()
    if not output_dir:
        raise InputError("no output directory: give output_dir=DIR", ["output_dir"])
    if num_shards < 1:
        raise InputError(f"num_shards must be at least 1, got {num_shards}", ["num_shards"])
    description, entries = read_entries(input_path, nltk_sample)
    vocabularies = None
    if vocab_from:
        try:
            vocabularies = tags_lib.TagVocabularies.load(vocab_from)
        except (FileNotFoundError, ValueError) as e:
            raise InputError(f"vocab_from: {e}", ["vocab_from"]) from None
    _check_writable_directory(output_dir)
    if stats_path:
        _check_writable_directory(os.path.dirname(os.path.abspath(stats_path)))

    from tetra_tf.data import records  # TensorFlow is slow to import; not needed for usage errors.

    written, stats = convert_entries(entries, vocabularies, report, progress)
    stats["input"] = description
    if nltk_sample:
        stats["licence"] = treebank.NLTK_SAMPLE_LICENCE
    if not written:
        _write_stats(stats, stats_path)
        raise RuntimeError(f"no tree was written ({stats['trees_read']} read)")

    if vocabularies is None:
        vocabularies = tags_lib.TagVocabularies.build(t for t, _ in written)
        vocabularies.save(output_dir)
    else:
        for name in VOCAB_FILES:
            source, target = os.path.join(vocab_from, name), os.path.join(output_dir, name)
            if not (os.path.exists(target) and os.path.samefile(source, target)):
                shutil.copyfile(source, target)

    examples = [
        records.make_example(tetra_tags,
                             vocabularies.encode(tetra_tags, unknown=records.UNKNOWN_TAG_ID),
                             tree_line)
        for tetra_tags, tree_line in written]
    for stale in glob.glob(os.path.join(output_dir, records.RECORD_FILE_PATTERN)):
        os.remove(stale)
    paths = records.write_records(examples, output_dir, num_shards)
    with open(os.path.join(output_dir, TREES_FILE), "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for _, line in written)

    stats["vocab"] = {"leaf": len(vocabularies.leaf), "internal": len(vocabularies.internal),
                      "pos": len(vocabularies.pos), "from": vocab_from}
    stats["output_dir"] = output_dir
    stats["record_files"] = [os.path.basename(p) for p in paths]
    stats["seconds"] = round(time.monotonic() - start_time, 2)
    _write_stats(stats, stats_path)
    return stats


def _write_stats(stats: dict, stats_path: str | None) -> None:
    if stats_path:
        with open(stats_path, "w", encoding="utf-8") as f:
            json.dump(stats, f, indent=2)
            f.write("\n")


def summary_line(stats: dict) -> str:
    """Returns the one-line summary printed at the end of a run."""
    skipped = stats["trees_skipped"]
    reasons = ", ".join(f"{k}: {v}" for k, v in skipped["reasons"].items() if v)
    depths = [int(d) for d in stats["max_depth_histogram"]]
    vocab = stats["vocab"]
    return (f"{PROGRAM}: {stats['input']}: read {stats['trees_read']} trees, wrote "
            f"{stats['trees_written']} to {stats['output_dir']} "
            f"({len(stats['record_files'])} shard(s)), skipped {skipped['count']}"
            f"{f' ({reasons})' if reasons else ''}; {stats['words']} words, max stack depth "
            f"{max(depths)}; vocab leaf/internal/pos {vocab['leaf']}/{vocab['internal']}/"
            f"{vocab['pos']}; {stats['seconds']:.1f} s")


def _error(message: str) -> None:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)


def _run_with_flags(argv: list[str], flag_values: flags.FlagValues) -> int:
    if len(argv) > 1:
        _error(f"unexpected arguments: {' '.join(argv[1:])} (flags need --name=value)")
        return 2
    try:
        stats = run(input_path=flag_values.input, nltk_sample=flag_values.nltk_sample,
                    output_dir=flag_values.output_dir, stats_path=flag_values.stats,
                    vocab_from=flag_values.vocab_from, num_shards=flag_values.num_shards)
    except TetraError as e:
        _error(cli_lib.in_flag_words(e, FLAG_NAMES, flag_values))
        return 2
    except (RuntimeError, OSError, ValueError) as e:
        _error(str(e))
        return 1
    print(summary_line(stats))
    return 0


def main(argv: list[str]) -> int:
    """The absl entry point (flags already parsed into flags.FLAGS)."""
    return _run_with_flags(argv, flags.FLAGS)


def cli(argv: list[str]) -> int:
    """Parses `argv` (argv[0] being the program) into fresh flags and runs.

    The same as the command line, minus --help, for callers in the same process.

    Returns:
      The exit code.
    """
    flag_values = flags.FlagValues()
    _define_flags(flag_values)
    try:
        remaining = flag_values(argv)
    except flags.Error as e:
        _error(str(e).splitlines()[0] if str(e) else "bad flags")
        return 2
    return _run_with_flags(remaining, flag_values)


def define_flags() -> None:
    """Defines the program's flags (tools/convert_ptb.py, python -m tetra_tf.convert)."""
    _define_flags(flags.FLAGS)



def run_program() -> None:
    """Runs `python -m tetra_tf.convert` (tetra_tf/convert.py)."""
    define_flags()
    cli_lib.adopt_program_flags(__name__)
    cli_lib.run(main)
