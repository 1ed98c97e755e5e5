#!/usr/bin/env python3
"""Scores an exported SavedModel on gold trees, EVALB-style (tetra_tf.evaluate).

  python tools/eval_export.py --export_dir=models/tetra/1 \
      --gold=data/ptb_sample/test/trees.txt [--pos=gold|predicted] [--output=PRED_FILE]

Parses the gold trees' words with `tetra_tf.Parser` (the exported graph end to end), puts
the gold POS tags on the leaves (--pos=gold, the standard for WSJ F1 and what training
reports as dev F1) or keeps the predicted ones, and scores the trees with the COLLINS.prm
settings. Prints F1, recall, precision, exact match and POS accuracy; --output writes the
predicted trees, one per line, for `python -m tetra_tf.evaluate GOLD PRED`.

Exit codes: 0 scored; 2 usage or input error (missing flags, unreadable files, a gold
line that is not a tree, no SavedModel); 1 any other failure.
"""

from __future__ import annotations

import dataclasses
import os
import sys

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

import tetra_tf  # noqa: E402,F401  (selects Keras 2 before TensorFlow loads)

from absl import flags  # noqa: E402
import nltk  # noqa: E402
from tqdm import tqdm  # noqa: E402

from tetra_tf import cli, evaluate  # noqa: E402

FLAGS = flags.FLAGS


def read_gold(path: str) -> tuple[list[str], list[nltk.Tree]]:
    """Gold tree lines (blank lines skipped) and their trees; ValueError names a bad line."""
    lines, trees = [], []
    for number, line in enumerate(evaluate.read_lines(path), start=1):
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


def score_export(export_dir: str, gold_lines: list[str], gold_trees: list[nltk.Tree],
                 gold_pos: bool = True, batch_size: int = 64, progress: bool = False):
    """Parses the gold trees' words; returns (EvalbResult, POS accuracy %, predicted lines)."""
    from tetra_tf.parser import Parser, with_pos_tags  # pylint: disable=import-outside-toplevel

    parser = Parser(export_dir)
    bar = tqdm(total=len(gold_trees), unit="sent", disable=not progress, file=sys.stderr)
    predicted = parser.parse_sents([t.leaves() for t in gold_trees], batch_size,
                                   progress=bar.update)
    bar.close()
    correct = total = 0
    lines = []
    for tree, gold in zip(predicted, gold_trees):
        gold_tags = [pos for _, pos in gold.pos()]
        correct += sum(p == g for (_, p), g in zip(tree.pos(), gold_tags))
        total += len(gold_tags)
        if gold_pos:
            tree = with_pos_tags(tree, gold_tags)
        lines.append(evaluate.tree_to_line(tree))
    # Score every sentence: predicted POS on punctuation gives EVALB length errors, and
    # COLLINS.prm's MAX_ERROR would stop after 10 of them.
    params = dataclasses.replace(evaluate.COLLINS, max_error=len(gold_lines) + 1)
    result = evaluate.evaluate_lines(gold_lines, lines, params)
    return result, 100.0 * correct / max(total, 1), lines


def define_flags() -> None:
    """Defines the flags; only when run as a program."""
    flags.DEFINE_string("export_dir", None, "The exported SavedModel (models/tetra/1).")
    flags.DEFINE_string("gold", None, "Gold trees, one per line (e.g. a convert_ptb "
                        "output's trees.txt).")
    flags.DEFINE_enum("pos", "gold", ["gold", "predicted"], "POS tags on the scored leaves.")
    flags.DEFINE_string("output", None, "Write the predicted trees here.")
    flags.DEFINE_integer("batch_size", 64, "Sentences per call of the model.")


def main(argv) -> int:
    del argv
    cli.require("export_dir", "gold")
    gold_lines, gold_trees = read_gold(FLAGS.gold)
    result, pos_accuracy, lines = score_export(
        FLAGS.export_dir, gold_lines, gold_trees, FLAGS.pos == "gold", FLAGS.batch_size,
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
