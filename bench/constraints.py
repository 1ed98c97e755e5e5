#!/usr/bin/env python3
"""Constrained parsing: F1 as more of the gold spans are forced, and what it costs.

  python bench/constraints.py --export_dir=models/tetra/1 [--split=test]
      [--before_export_dir=DIR] [--batch_size=64] [--repeats=3] [--seed=0]

Printed from one run:

* F1 by the share of gold constituents forced: for each share, every gold constituent
  of the split's trees (the gold words) is forced with that probability, with its label,
  and up to three spans that are not gold constituents are forbidden; the table gives the
  test split's F1 (EVALB, COLLINS.prm, gold POS), the sentences refused as unsatisfiable
  (parsed without constraints for F1), and a check that every parse holds every forced
  span and no forbidden one;
* F1 when the unconstrained parse's wrong constituents are forbidden, by share;
* speed, the same sentences side by side, alternating in each repeat: the default
  signature (and, with --before_export_dir, the default signature of an export made
  before parse_constrained existed), and ``parse_constrained`` with no constraints and
  with half the gold spans forced;
* growth with length: one sentence of n words at batch 1, the default signature vs
  ``parse_constrained`` (its chart's work grows with n³).

Exit codes: 0 measured; 1 failure; 2 usage error.
"""

from __future__ import annotations

import collections
import random
import time

from absl import flags

from tetra_tf import cli

FLAGS = flags.FLAGS
SHARES = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)
LENGTHS = (10, 20, 40, 80, 160)


def constituents(tree) -> list[tuple[str, int, int]]:
    """(label, first word, last word) of each bracket but the root's and the parts of
    speech'."""
    out = []

    def walk(node, first: int) -> int:
        if isinstance(node[0], str):
            return first + 1
        position = first
        for child in node:
            position = walk(child, position)
        out.append((node.label(), first, position - 1))
        return position

    walk(tree, 0)
    return out[:-1]


def forced_gold(rng: random.Random, gold, labels: set[str], share: float):
    """Constraints forcing each gold constituent with probability `share` and forbidding up
    to three spans that are not gold constituents."""
    from tetra_tf.decode.constraints import Constraints

    spans = constituents(gold)
    forced = [(first, last, label if label in labels else None)
              for label, first, last in spans if rng.random() < share]
    gold_spans = {(first, last) for _, first, last in spans}
    n = len(gold.leaves())
    others = [(i, j) for i in range(n) for j in range(i + 1, min(n, i + 8))
              if (i, j) not in gold_spans]
    return Constraints(forced=forced, forbidden=rng.sample(others, min(3, len(others))))


def holds(tree, constraints) -> bool:
    """Whether a tree has every forced span (with its label) and no forbidden one."""
    found = constituents(tree)
    spans = {(first, last) for _, first, last in found}
    return (all(any((first, last) == (span.start, span.end)
                    and span.label in (None, label) for label, first, last in found)
                for span in constraints.forced)
            and not any((span.start, span.end) in spans for span in constraints.forbidden))


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main(argv) -> int:
    del argv
    cli.require("export_dir")
    from tetra_tf.contract.sentences import SentenceError
    from tetra_tf.decode.constraints import Constraints
    from tetra_tf.parser import Parser
    from tetra_tf.trees import scoring, treebank

    gold_trees = [treebank.clean_tree(entry.tree)
                  for entry in treebank.read_nltk_sample(FLAGS.split) if entry.tree is not None]
    word_lists = [tree.leaves() for tree in gold_trees]
    parser = Parser(FLAGS.export_dir)
    labels = set(parser.phrase_labels)
    plain = parser.parse_each(word_lists, FLAGS.batch_size)
    plain_trees = [result.tree for result in plain]
    print(f"{FLAGS.export_dir}: the {FLAGS.split} split of the NLTK sample, "
          f"{len(word_lists)} sentences (gold words)")

    def run(constraint_sets):
        results = parser.parse_each(word_lists, FLAGS.batch_size, constraints=constraint_sets)
        refused = collections.Counter(r.reason for r in results if isinstance(r, SentenceError))
        kept = sum(holds(r.tree, c) for r, c in zip(results, constraint_sets)
                   if not isinstance(r, SentenceError))
        trees = [plain_trees[i] if isinstance(r, SentenceError) else r.tree
                 for i, r in enumerate(results)]
        return scoring.score_parses(gold_trees, trees).f1, refused, kept, len(results) - sum(
            refused.values())

    rng = random.Random(FLAGS.seed)
    print("forcing gold constituents (with their labels; and forbidding up to 3 non-gold "
          "spans per sentence):")
    print("| share forced | spans forced | F1 | unsatisfiable | parses holding every "
          "constraint |")
    print("|---|---|---|---|---|")
    for share in SHARES:
        sets = [forced_gold(rng, gold, labels, share) for gold in gold_trees]
        f1, refused, kept, parsed = run(sets)
        print(f"| {100 * share:.0f}% | {sum(len(c.forced) for c in sets)} | {f1:.2f} | "
              f"{sum(refused.values())} | {kept} of {parsed} |")

    print("forbidding the unconstrained parse's wrong constituents:")
    print("| share forbidden | spans forbidden | F1 | unsatisfiable | parses holding every "
          "constraint |")
    print("|---|---|---|---|---|")
    for share in SHARES[1:]:
        sets = []
        for gold, tree in zip(gold_trees, plain_trees):
            gold_spans = {(first, last) for _, first, last in constituents(gold)}
            wrong = sorted({(first, last) for _, first, last in constituents(tree)}
                           - gold_spans)
            sets.append(Constraints(forbidden=[s for s in wrong if rng.random() < share]))
        f1, refused, kept, parsed = run(sets)
        print(f"| {100 * share:.0f}% | {sum(len(c.forbidden) for c in sets)} | {f1:.2f} | "
              f"{sum(refused.values())} | {kept} of {parsed} |")

    half = [forced_gold(random.Random(FLAGS.seed), gold, labels, 0.5) for gold in gold_trees]
    ways = [("default", parser, {}),
            ("parse_constrained, no constraints", parser,
             {"constraints": [None] * len(word_lists)}),
            ("parse_constrained, half the gold spans forced", parser, {"constraints": half})]
    if FLAGS.before_export_dir:
        ways.insert(0, ("default, export before parse_constrained",
                        Parser(FLAGS.before_export_dir), {}))
    seconds = collections.defaultdict(list)
    for _ in range(FLAGS.repeats):
        for name, way, options in ways:
            seconds[name].append(timed(lambda: way.parse_each(
                word_lists, FLAGS.batch_size, **options)))
    print(f"speed, batch {FLAGS.batch_size}, best of {FLAGS.repeats} (alternating):")
    best = {name: min(values) for name, values in seconds.items()}
    for name, value in best.items():
        print(f"  {name}: {len(word_lists) / value:.1f} sentences/s "
              f"({value / best['default']:.3f}× the default's time)")

    words = [word for sentence in word_lists for word in sentence]
    print("growth with length, one sentence at batch 1, no constraints, best of "
          f"{FLAGS.repeats} (ms):")
    print("| words | default | parse_constrained | added |")
    print("|---|---|---|---|")
    for n in LENGTHS:
        sentence = [words[:n]]
        row = []
        for options in ({}, {"constraints": [None]}):
            parser.parse_each(sentence, **options)  # warm
            row.append(min(timed(lambda: parser.parse_each(sentence, **options))
                           for _ in range(FLAGS.repeats)))
        default, constrained = (1000 * t for t in row)
        print(f"| {n} | {default:.1f} | {constrained:.1f} | {constrained - default:.1f} |")
    return 0


if __name__ == "__main__":
    flags.DEFINE_string("export_dir", None, "The exported SavedModel (models/tetra/1).")
    flags.DEFINE_string("before_export_dir", None,
                        "An export of the same model made before parse_constrained existed, "
                        "to compare the default signature's speed with.")
    flags.DEFINE_string("split", "test", "The NLTK sample's split.")
    flags.DEFINE_integer("batch_size", 64, "Sentences per model call.", lower_bound=1)
    flags.DEFINE_integer("repeats", 3, "Timed runs of each way (the best counts).",
                         lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed of the random constraints.")
    cli.run(main)
