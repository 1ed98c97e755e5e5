"""What the bulk programs share: their common options, and the files --ordered writes.

The three programs that parse files in bulk, `tetra_tf.parse` (absl flags),
`tetra_tf.beam_parse` (argparse, as Beam's pipeline options are) and `tetra_tf.spark_parse`
(absl flags), define their common options from one table, `OPTIONS`: name, type, default,
help and check. Each program names the options it really has; `define_absl_flags` or
`add_argparse_arguments` defines them, and `check` tests their values the same way
everywhere (a missing required option, a bad number, --errors without --on_error=skip, a
--model_dir without a SavedModel), raising `cli.UsageError` for the first problem.

Ordered output (--ordered of Beam and Spark): for each input file, ``FOLDER/PATH.trees``
(FOLDER: the output followed by ``-ordered``; PATH: the file's path below the common folder
of all the input files) holds one line per input line, in input order: the line's bracketed
tree, or an empty line where the line was refused. An input file without lines (an empty
file) gets an empty ``.trees`` file. `OrderedWriter` writes these files; Beam and Spark
only bring each file's (line number, tree) pairs to it, and their own way to open a file.

No TensorFlow here (a remote ``.trees`` file is opened with tf.io.gfile when written).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Mapping

from absl import flags

from tetra_tf import cli, packaged_models
from tetra_tf.contract import export_format, sentences
from tetra_tf.errors import ExportError

# Flags defined here belong to the program that asks for them (they show in its --help).
flags.disclaim_key_flags()

ON_ERROR_CHOICES = ("fail", "skip")


@dataclasses.dataclass(frozen=True)
class Option:
    """One common option of the bulk programs.

    Attributes:
      key: its name in `OPTIONS`, in `check`'s values and as argparse's dest.
      kind: str, int, float or bool.
      default: its value when not given.
      help: what it does, for --help.
      flag: the flag's name on the command line (default: key).
      required: whether a program that has it needs a value.
      repeated: it may be given more than once; its value is a list.
      choices: the values a str option takes (empty: any).
      minimum: the least value a number option takes.
      check: the owner of the values a number option takes, called with (value, flag
        name), raising ValueError with the message for any other value (NaN included).
    """

    key: str
    kind: type
    default: Any
    help: str
    flag: str = ""
    required: bool = False
    repeated: bool = False
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    check: Callable[[Any, str], Any] | None = None

    @property
    def name(self) -> str:
        """The flag's name (without the dashes)."""
        return self.flag or self.key

    def full_help(self) -> str:
        """The help text, saying whether the option is required."""
        return f"{self.help} Required." if self.required else self.help


_ORDERED_HELP = ("Also write OUTPUT-ordered/PATH.trees per input file (PATH below the input "
                 "files' common folder): one tree per line in input order, an empty line for a "
                 "refused line; an empty file for an input file without lines.")

_MARGINALS_HELP = ("Also give each parsed sentence its tree's probability among all valid "
                   "trees (tree_probability) and each constituent's probability "
                   "(constituent_marginals: one per bracket, in the order the tree opens "
                   "them, the root's and the parts of speech' left out), from the export's "
                   "parse_marginals signature; a sentence longer than that signature takes "
                   "is then refused (too_many_words).")

_SPAN_MARGINALS_HELP = ("A probability from 0 to 1 (the floor): also give each parsed "
                        "sentence every labelled span, in its tree or not, whose probability "
                        "is at least the floor (span_marginals: label, start and end word, "
                        "0-based and inclusive, and probability; by start, end, label), from "
                        "the export's parse_span_marginals signature. Implies --marginals. Its "
                        "work grows with words cubed: a sentence of more than "
                        f"{export_format.MAX_MARGINALS_WORDS} words (that signature's bound) "
                        "is refused (too_many_words).")

OPTIONS: dict[str, Option] = {option.key: option for option in (
    Option("model_dir", str, None, "The model to parse with: the name of a model packaged "
           "with tetra-tf (tetra_tf.packaged_models), or your own exported SavedModel "
           "(tetra_tf.export's --export_dir, e.g. models/tetra/1; on a cluster, at a path "
           "every worker reads: gs://, a shared folder ...). Default: the packaged model "
           f"{packaged_models.DEFAULT_MODEL}."),
    # parse.py's input and output: one stream each.
    Option("input", str, None, "Input file, one sentence per line, UTF-8; .gz, .bz2, .xz "
           "and .zst are decompressed (default: stdin)."),
    Option("output", str, None, "Output file, one tree per line (default: stdout). Written to "
           "a temporary file next to it and renamed onto it only when the run succeeds."),
    # The corpus programs' (Beam's and Spark's) inputs and output.
    Option("corpus_input", str, None, "Input file or glob (for Spark also a folder), one "
           "sentence per line, UTF-8; compressed files are decompressed by extension. May be "
           "repeated.", flag="input", required=True, repeated=True),
    Option("corpus_output", str, None, "Where the results go: the name their files or "
           "folders start with (see above), OUTPUT-ordered/ included.", flag="output",
           required=True),
    Option("tokenize", bool, False, "Input is raw text, one sentence per line: split it "
           "into PTB tokens first (NLTK's Treebank rules, as the SavedModel's parse_text "
           "signature)."),
    Option("documents", bool, False, "Each input line is a document of raw text: split it "
           "into sentences and PTB tokens; each sentence gets its own output (a line, "
           "record or row) with the line's number, the sentence's number in it (from 1) "
           "and its start and end character offsets in the line."),
    Option("batch_size", int, export_format.DEFAULT_BATCH_SIZE,
           "Most sentences per call of the model.", minimum=1),
    Option("max_words", int, 0, "A sentence with more words than this (after --tokenize) is "
           "refused (too_many_words); 0: no limit beyond the export's (a sentence's subword "
           "pieces, its max_pieces_per_call).", minimum=0),
    Option("max_line_bytes", int, sentences.DEFAULT_MAX_LINE_BYTES, "An input line of more "
           "bytes than this (without its line end) is refused (too_long); it is skipped over "
           "in bounded pieces, never held in memory.", minimum=1),
    Option("on_error", str, "fail", "What a refused line does: 'fail' stops with exit code 2 "
           "naming it; 'skip' writes an empty output line in its place, reports it to "
           "--errors and goes on (exit code 0).", choices=ON_ERROR_CHOICES),
    Option("errors", str, None, "With --on_error=skip: write one 'line N: REASON: DETAIL' "
           "line per refused input line here (default: stderr)."),
    Option("ordered", bool, False, _ORDERED_HELP),
    # The corpus programs' marginals (parse.py's --marginals is its own: a line format).
    Option("marginals", bool, False, _MARGINALS_HELP),
    Option("span_marginals", float, None, _SPAN_MARGINALS_HELP,
           check=export_format.check_span_floor),
)}


def _options(keys: Iterable[str]) -> list[Option]:
    """The table's options of these keys, in the given order.

    Raises:
      KeyError: for a key that is no common option.
    """
    return [OPTIONS[key] for key in keys]


def define_absl_flags(keys: Iterable[str],
                      flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines these options as absl flags (of the calling program's module)."""
    for option in _options(keys):
        args = (option.name, option.default, option.full_help())
        if option.kind is bool:
            flags.DEFINE_bool(*args, flag_values=flag_values)
        elif option.kind is int:
            flags.DEFINE_integer(*args, flag_values=flag_values)
        elif option.kind is float:
            flags.DEFINE_float(*args, flag_values=flag_values)
        elif option.repeated:
            flags.DEFINE_multi_string(*args, flag_values=flag_values)
        elif option.choices:
            flags.DEFINE_enum(option.name, option.default, list(option.choices),
                              option.full_help(), flag_values=flag_values)
        else:
            flags.DEFINE_string(*args, flag_values=flag_values)


def absl_values(keys: Iterable[str],
                flag_values: flags.FlagValues = flags.FLAGS) -> dict[str, Any]:
    """These options' values from the parsed absl flags, by key (for `check`)."""
    return {option.key: flag_values[option.name].value for option in _options(keys)}


def add_argparse_arguments(parser: argparse.ArgumentParser, keys: Iterable[str]) -> None:
    """Adds these options to an argparse parser; each one's dest is its key."""
    for option in _options(keys):
        help_text = option.full_help()
        if option.default not in (None, False):
            help_text += " Default: %(default)s."
        arguments: dict[str, Any] = {"dest": option.key, "help": help_text}
        if option.kind is bool:
            arguments["action"] = "store_true"
        else:
            arguments.update(type=option.kind, default=option.default,
                             metavar=option.name.upper())
            if option.repeated:
                arguments["action"] = "append"
            if option.choices:
                arguments["choices"] = option.choices
        parser.add_argument(f"--{option.name}", **arguments)


def check(values: Mapping[str, Any]) -> None:
    """Checks the common options' values (by key; other keys are left alone).

    The values' own checks come first, in `OPTIONS`' order; then --errors without
    --on_error=skip; last, as it reads the model directory, a --model_dir (or the packaged
    default model) without a SavedModel.

    Raises:
      cli.UsageError: naming the first problem.
    """
    for option in OPTIONS.values():
        if option.key in values:
            _check_value(option, values[option.key])
    if values.get("documents") and values.get("tokenize"):
        raise cli.UsageError("--documents splits raw text into tokens itself: leave out "
                             "--tokenize")
    if values.get("documents") and values.get("ordered"):
        raise cli.UsageError("--ordered writes one tree per input line; with --documents a "
                             "line has a tree per sentence (leave out one of them)")
    if values.get("errors") is not None and values.get("on_error", "skip") != "skip":
        raise cli.UsageError("--errors needs --on_error=skip (with 'fail' the first refused "
                             "line goes to stderr)")
    if "model_dir" in values:
        try:
            export_format.check(packaged_models.resolve(values["model_dir"]))
        except ExportError as e:
            raise cli.UsageError(f"--model_dir: {e}") from None


def _check_value(option: Option, value: Any) -> None:
    if option.required and value in (None, "", []):
        raise cli.UsageError(f"--{option.name} is required (see --help)")
    if option.choices and value is not None and value not in option.choices:
        raise cli.UsageError(f"--{option.name} must be one of {', '.join(option.choices)}, "
                             f"got {value!r}")
    if value is None:
        return
    if option.check is not None:
        try:
            option.check(value, f"--{option.name}")
        except ValueError as e:
            raise cli.UsageError(str(e)) from None
    if option.minimum is not None and value < option.minimum:
        limit = "positive" if option.minimum == 1 else f"{option.minimum} or more"
        raise cli.UsageError(f"--{option.name} must be {limit}")


# --------------------------------------------------------------------------------------
# Ordered output

ORDERED_INFIX = "-ordered"
ORDERED_SUFFIX = ".trees"


def ordered_folder(output: str) -> str:
    """The folder --ordered writes into for an output name."""
    return output.rstrip("/") + ORDERED_INFIX


def _comparable(path: str) -> str:
    """A path as the ordered output compares it: a "file:" URI as a local path, a local path
    made absolute, any other URI (gs://, hdfs://, ...) as it is."""
    if path.startswith("file:"):
        path = "/" + path[len("file:"):].lstrip("/")
    if "://" in path:
        return path
    absolute = os.path.abspath(path)
    return absolute + "/" if path.endswith("/") and absolute != "/" else absolute


def common_folder(paths: Iterable[str]) -> str:
    """The deepest folder holding every path ("" for no paths), ending in "/".

    A path ending in "/" is a folder itself and "" is no path, so that the common folder of
    common folders is that of all their paths (Beam combines it in parts, some empty).
    """
    folders = [_comparable(path).rsplit("/", 1)[0].split("/") for path in paths if path]
    if not folders:
        return ""
    common: list[str] = []
    for level in zip(*folders):
        if any(part != level[0] for part in level):
            break
        common.append(level[0])
    return "/".join(common) + "/"


def _open_for_writing(path: str) -> IO[bytes]:
    """A new binary file at path (its folders made): local, or any file system TensorFlow
    writes (gs:// ...)."""
    if path.startswith("file:"):
        path = _comparable(path)
    if "://" in path:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        tf.io.gfile.makedirs(path.rsplit("/", 1)[0])
        return tf.io.gfile.GFile(path, "wb")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return open(path, "wb")  # pylint: disable=consider-using-with


class OrderedWriter:
    """Writes the ordered output (see the module doc): one ``.trees`` file per input file.

    Picklable, so that Beam's and Spark's workers each write the files of their inputs.
    """

    def __init__(self, folder: str, root: str,
                 open_file: Callable[[str], IO[bytes]] = _open_for_writing):
        """Args:
          folder: where the files go (`ordered_folder` of the output); on a cluster, a
            path every worker reads the same (qualified, not relative).
          root: the input files' `common_folder`.
          open_file: opens a new binary file at a path, making its folders (default: a
            local path, or any file system TensorFlow writes).
        """
        self.folder, self.open_file = folder, open_file
        self.root = _comparable(root) if root else ""

    def target(self, input_path: str) -> str:
        """Where the trees of the input file at input_path go."""
        path = _comparable(input_path)
        relative = (path[len(self.root):] if self.root and path.startswith(self.root)
                    else path.split("://", 1)[-1].lstrip("/"))
        return self.folder.rstrip("/") + "/" + relative + ORDERED_SUFFIX

    def write(self, input_path: str, numbered_trees: Iterable[tuple[int, str | None]]) -> str:
        """Writes one input file's trees; returns the file written.

        Args:
          numbered_trees: (line number, tree or None for a refused line) for every line of
            the file, in order of line number (none for a file without lines).

        Raises:
          RuntimeError: a line is missing or comes twice (the results are incomplete).
        """
        target = self.target(input_path)
        with contextlib.closing(self.open_file(target)) as stream:
            for expected, (number, tree) in enumerate(numbered_trees, start=1):
                if number != expected:
                    raise RuntimeError(f"{input_path}: the results have line {number} where "
                                       f"line {expected} belongs (a line is missing or twice "
                                       "there)")
                stream.write((tree or "").encode("utf-8") + b"\n")
        return target
