r"""Parses sentences, one per line, with an exported SavedModel; writes one tree per line.

  python -m tetra_tf.parse --model_dir=models/tetra/1 [--input=FILE] [--output=FILE]
      [--tokenize] [--batch_size=64] [--scores]
  python -m tetra_tf.parse --model_dir=models/tetra/1 --describe

Input (stdin by default, UTF-8): one sentence per line, pre-tokenized Penn Treebank tokens
separated by whitespace (-LRB-, ``, 1\/2 ... as in the treebank); with --tokenize, raw
text, split into PTB tokens by NLTK's Treebank-style word tokenizer (brackets become
-LRB- etc., double quotes `` and ''). Output (stdout by default): one bracketed tree per
input line, in order, ``(TOP (S ...))`` with the predicted POS tags, ready for EVALB.
Tokens holding a bracket, such as ``:-)``, are written with -LRB-/-RRB- in its place so that
every output line stays a readable tree. With --scores each line is the tree's score (the
log-probability of its tags, ≤ 0), a tab, then the tree. --describe prints the export's
model card (encoder, training data, dev/test F1) instead of parsing.

Exit codes:
  0  parsed every line
  1  internal failure
  2  usage or input error: bad flags, a missing or unreadable model directory or input
     file, an unwritable output file, or an empty input line (the message names it)
"""

from __future__ import annotations

import os
import sys
from typing import Sequence, TextIO

import tetra_tf  # noqa: F401  (selects Keras 2 before TensorFlow loads)

from absl import app, flags

from tetra_tf import cli
from tqdm import tqdm

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
# Lines are parsed (and written) in chunks, each sorted by length inside the Parser.
CHUNK_SIZE = 4096
_BRACKET_ESCAPES = (("(", "-LRB-"), (")", "-RRB-"))
_QUOTE_ESCAPES = {"\u201c": "``", "\u201d": "''", "\u2018": "`", "\u2019": "'"}


class InputError(Exception):
    """A problem with the input or the flags: reported in one line, exit code 2."""


def escape_brackets(word: str) -> str:
    """Replaces '(' and ')' in a token with -LRB- and -RRB- (a bare '(' → -LRB-)."""
    for bracket, escape in _BRACKET_ESCAPES:
        word = word.replace(bracket, escape)
    return word


def ptb_tokenize(text: str) -> list[str]:
    """Splits raw text into PTB-style tokens (NLTK's improved Treebank tokenizer).

    Brackets become -LRB-/-RRB-/-LSB-/..., straight and curly double quotes `` and '',
    and the sentence-final period is split off; needs no NLTK data downloads.
    """
    from nltk.tokenize import NLTKWordTokenizer  # pylint: disable=import-outside-toplevel

    tokens = NLTKWordTokenizer().tokenize(text, convert_parentheses=True)
    return [_QUOTE_ESCAPES.get(token, token) for token in tokens]


def read_sentences(lines: Sequence[str], tokenize: bool) -> list[list[str]]:
    """Turns input lines into word lists.

    Raises:
      InputError: for an empty (or whitespace-only) line, naming its 1-based number.
    """
    sentences = []
    for number, line in enumerate(lines, start=1):
        words = ptb_tokenize(line) if tokenize else line.split()
        if not words:
            raise InputError(f"line {number} is empty: give one sentence per line")
        sentences.append([escape_brackets(word) for word in words])
    return sentences


def format_scored(result) -> str:
    """One --scores output line (without newline): score, a tab, the one-line tree."""
    return f"{result.score:.4f}\t{result.bracketed}"


def describe(model_dir: str) -> str:
    """The export's model card as text, or a line saying that it has none.

    Raises:
      InputError: if model_dir holds no SavedModel.
    """
    from tetra_tf import model_card  # pylint: disable=import-outside-toplevel

    if not os.path.isfile(os.path.join(model_dir, "saved_model.pb")):
        raise InputError(f"--model_dir: {model_dir} holds no SavedModel (saved_model.pb)")
    card = model_card.read(model_dir)
    if card is None:
        return (f"{model_dir}: no model card (exported before tetra-tf wrote them, or by "
                "another tool); it still parses\n")
    return model_card.render(card)


def run(model_dir: str, input_file: TextIO, output_file: TextIO, tokenize: bool = False,
        batch_size: int = 64, progress: bool = False, parser=None, scores: bool = False) -> int:
    """Parses every line of input_file into output_file; returns the number of trees.

    Args:
      parser: an already loaded `Parser` of model_dir, to reuse.
      scores: write `format_scored` lines (score, tab, tree) instead of trees.

    Raises:
      InputError: for an empty line or a model directory that cannot be loaded.
    """
    if not os.path.isfile(os.path.join(model_dir, "saved_model.pb")):
        raise InputError(f"--model_dir: {model_dir} holds no SavedModel (saved_model.pb); "
                         "export one with python -m tetra_tf.export")
    text = input_file.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line
    sentences = read_sentences([line.rstrip("\r") for line in lines], tokenize)
    parser = parser or load_parser(model_dir)
    bar = tqdm(total=len(sentences), unit="sent", disable=not progress, file=sys.stderr)
    for start in range(0, len(sentences), CHUNK_SIZE):
        chunk = sentences[start:start + CHUNK_SIZE]
        if scores:
            lines = [format_scored(r) for r in
                     parser.parse_results(chunk, batch_size, progress=bar.update)]
        else:
            lines = parser.parse_to_strings(chunk, batch_size, progress=bar.update)
        for tree in lines:
            output_file.write(tree + "\n")
        output_file.flush()
    bar.close()
    return len(sentences)


def load_parser(model_dir: str):
    """Loads the Parser, turning a missing or foreign directory into an InputError."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel

    try:
        return Parser(model_dir)
    except (FileNotFoundError, ValueError) as e:
        raise InputError(f"--model_dir: {e}") from None
    except (OSError, tf.errors.OpError) as e:
        raise InputError(f"--model_dir: cannot load {model_dir} "
                         f"({str(e).splitlines()[0][:200]})") from None


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the flags; only when run as a program, so that importing stays side-effect free."""
    flags.DEFINE_string("model_dir", None, "The exported SavedModel (tetra_tf.export's "
                        "--export_dir, e.g. models/tetra/1).")
    flags.DEFINE_string("input", None, "Input file, one sentence per line (default: stdin).")
    flags.DEFINE_string("output", None, "Output file, one tree per line (default: stdout).")
    flags.DEFINE_bool("tokenize", False, "Input is raw text: split it into PTB tokens first.")
    flags.DEFINE_integer("batch_size", 64, "Sentences per call of the model.")
    flags.DEFINE_bool("scores", False, "Write each tree's score (log-probability of its tags), "
                      "a tab, then the tree.")
    flags.DEFINE_bool("describe", False, "Print the export's model card (encoder, data, "
                      "dev/test F1) and exit.")


def main(argv) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {' '.join(argv[1:])} (see --help)", file=sys.stderr)
        return EXIT_USAGE
    if not FLAGS.model_dir:
        print("error: --model_dir is required (see --help)", file=sys.stderr)
        return EXIT_USAGE
    if FLAGS.describe:
        try:
            sys.stdout.write(describe(FLAGS.model_dir))
        except InputError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    if FLAGS.batch_size < 1:
        print("error: --batch_size must be positive", file=sys.stderr)
        return EXIT_USAGE
    input_file = output_file = None
    try:
        if FLAGS.input:
            try:
                input_file = open(FLAGS.input, encoding="utf-8")
            except OSError as e:
                raise InputError(f"--input: cannot read {FLAGS.input} ({e.strerror})") from None
        if FLAGS.output:
            try:
                output_file = open(FLAGS.output, "w", encoding="utf-8")
            except OSError as e:
                raise InputError(f"--output: cannot write {FLAGS.output} ({e.strerror})") \
                    from None
        try:
            run(FLAGS.model_dir, input_file or sys.stdin, output_file or sys.stdout,
                FLAGS.tokenize, FLAGS.batch_size, progress=bool(FLAGS.input),
                scores=FLAGS.scores)
        except UnicodeDecodeError:
            raise InputError(f"{FLAGS.input or 'stdin'} is not UTF-8 text") from None
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # pylint: disable=broad-except
        print(f"error: parsing failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}",
              file=sys.stderr)
        return EXIT_FAILURE
    finally:
        for f in (input_file, output_file):
            if f is not None:
                f.close()
    return EXIT_OK


if __name__ == "__main__":
    define_flags()
    app.run(main, flags_parser=cli.parse_flags)
