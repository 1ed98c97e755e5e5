#!/usr/bin/env python3
"""Scores an exported SavedModel on gold trees, EVALB-style (tetra_tf.evalb).

  python tools/eval_export.py --export_dir=models/tetra/1 \
      --gold=data/ptb_sample/test/trees.txt [--pos=gold|predicted] [--output=PRED_FILE]

Parses the gold trees' words with `tetra_tf.Parser` (the exported graph end to end), puts
the gold POS tags on the leaves (--pos=gold, the standard for WSJ F1 and what training
reports as dev F1) or keeps the predicted ones, and scores the trees with the COLLINS.prm
settings. Prints F1, recall, precision, exact match and POS accuracy; --output writes the
predicted trees, one per line, for `python -m tetra_tf.evalb GOLD PRED`.

Exit codes: 0 scored; 2 usage or input error (missing flags, unreadable files, a gold
line that is not a tree, no SavedModel); 1 any other failure.
"""

from __future__ import annotations

import sys

from absl import flags
import nltk
from tqdm import tqdm

from tetra_tf import cli
from tetra_tf.contract.export_format import DEFAULT_BATCH_SIZE
from tetra_tf.trees import evalb

FLAGS = flags.FLAGS


def read_gold(path: str) -> tuple[list[str], list[nltk.Tree]]:
    """Gold tree lines (blank lines skipped) and their trees; ValueError names a bad line."""
    lines, trees = [], []
    for number, line in enumerate(evalb.read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            tree = nltk.Tree.fromstring(line)
        except ValueError as e:
            raise ValueError(f"{path}:{number}: not a tree ({e})") from None
        if not tree.leaves():
            raise ValueError(f"{path}:{number}: a tree without words")
        lines.append(line)
        trees.append(tree)
    return lines, trees


def score_export(export_dir: str, gold_trees: list[nltk.Tree], gold_pos: bool = True,
                 batch_size: int = DEFAULT_BATCH_SIZE, progress: bool = False):
    """Parses the gold trees' words; returns (EvalbResult, POS accuracy %, predicted lines)."""
    from tetra_tf.parser import Parser  # pylint: disable=import-outside-toplevel
    from tetra_tf.trees import scoring  # pylint: disable=import-outside-toplevel

    parser = Parser(export_dir)
    bar = tqdm(total=len(gold_trees), unit="sent", disable=not progress, file=sys.stderr)
    predicted = parser.parse_sents([t.leaves() for t in gold_trees], batch_size,
                                   progress=bar.update)
    bar.close()
    scores = scoring.score_parses(gold_trees, predicted)
    if gold_pos:
        return scores.evalb_gold_pos, scores.pos_accuracy, scores.with_gold_pos
    return scores.evalb_predicted_pos, scores.pos_accuracy, scores.predicted_lines


def define_flags() -> None:
    """Defines the flags; only when run as a program."""
    flags.DEFINE_string("export_dir", None, "The exported SavedModel (models/tetra/1).")
    flags.DEFINE_string("gold", None, "Gold trees, one per line (e.g. a convert_ptb "
                        "output's trees.txt).")
    flags.DEFINE_enum("pos", "gold", ["gold", "predicted"], "POS tags on the scored leaves.")
    flags.DEFINE_string("output", None, "Write the predicted trees here.")
    flags.DEFINE_integer("batch_size", DEFAULT_BATCH_SIZE, "Sentences per call of the model.")


def main(argv) -> int:
    del argv
    cli.require("export_dir", "gold")
    gold_lines, gold_trees = read_gold(FLAGS.gold)
    result, pos_accuracy, lines = score_export(
        FLAGS.export_dir, gold_trees, FLAGS.pos == "gold", FLAGS.batch_size,
        progress=True)
    if FLAGS.output:
        with open(FLAGS.output, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
    print(f"{len(gold_lines)} sentences, {FLAGS.pos} POS: F1 {result.fscore:.2f}, recall "
          f"{result.recall:.2f}, precision {result.precision:.2f}, exact match "
          f"{result.complete_match:.2f}; POS accuracy (predicted) {pos_accuracy:.2f}")
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main, user_errors=(OSError, ValueError))
