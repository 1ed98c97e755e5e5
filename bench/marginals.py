#!/usr/bin/env python3
"""Constituent marginals: how well calibrated they are, and what they and k-best cost.

  python bench/marginals.py --export_dir=models/tetra/1 [--splits=dev,test]
      [--before_export_dir=DIR] [--batch_size=64] [--repeats=3] [--min_span_probability=0.01]

Printed from one run:

* calibration: every constituent of every parse of the splits' gold leaves, bucketed by
  its marginal (`ParseResult.constituents`), with the share of each bucket that is in the
  gold tree (same label and span; counted as EVALB counts, each gold constituent matched
  once); and so for every labelled span of at least --min_span_probability
  (``parse_span_marginals``), in the tree or not;
* speed, the same sentences side by side, alternating in each repeat: the default
  signature (and, with --before_export_dir, the default signature of an export made
  before marginals existed), ``parse_marginals``, ``parse_k_best`` and
  ``parse_span_marginals``: sentences per second and what each adds per sentence;
* growth with length: one sentence of n words (the splits' words, cut to n) at batch 1,
  the default signature vs the three others, for several n.

Exit codes: 0 measured; 1 failure; 2 usage error.
"""

from __future__ import annotations

import collections
import time

from absl import flags

from tetra_tf import cli

FLAGS = flags.FLAGS
BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
LENGTHS = (10, 20, 40, 80, 160)


def gold_constituents(tree) -> collections.Counter:
    """(label, first word, last word) of each bracket but the root's and the parts of
    speech'."""
    counts: collections.Counter = collections.Counter()
    position = 0
    spans = {}
    for leaf_position in tree.treepositions("leaves"):
        for depth in range(1, len(leaf_position) - 1):
            prefix = leaf_position[:depth]
            first, _ = spans.get(prefix, (position, position))
            spans[prefix] = (first, position)
        position += 1
    for prefix, (first, last) in spans.items():
        if not isinstance(tree[prefix][0], str):  # not a part of speech
            counts[(tree[prefix].label(), first, last)] += 1
    return counts


def calibration(results, gold_trees, every_span: bool = False
                ) -> list[tuple[float, float, int, int]]:
    """Per bucket: (low, high, constituents, of them in the gold tree); of each parse's
    constituents, or with every_span of its `span_marginals`."""
    totals = [[0, 0] for _ in BUCKETS[:-1]]
    for result, gold in zip(results, gold_trees):
        remaining = gold_constituents(gold)
        for constituent in (result.span_marginals if every_span else result.constituents):
            key = (constituent.label, constituent.start, constituent.end)
            bucket = min(int(constituent.probability * 10), 9)
            totals[bucket][0] += 1
            if remaining[key] > 0:
                remaining[key] -= 1
                totals[bucket][1] += 1
    return [(BUCKETS[b], BUCKETS[b + 1], n, right) for b, (n, right) in enumerate(totals)]


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def main(argv) -> int:
    del argv
    cli.require("export_dir")
    from tetra_tf.parser import Parser
    from tetra_tf.trees import treebank

    splits = [split.strip() for split in FLAGS.splits.split(",") if split.strip()]
    gold_trees = [treebank.clean_tree(entry.tree) for split in splits
                  for entry in treebank.read_nltk_sample(split) if entry.tree is not None]
    word_lists = [tree.leaves() for tree in gold_trees]
    parser = Parser(FLAGS.export_dir)
    span_options = {"span_marginals": FLAGS.min_span_probability}
    results = parser.parse_each(word_lists, FLAGS.batch_size, **span_options)
    plain = parser.parse_each(word_lists, FLAGS.batch_size)
    assert [r.bracketed for r in results] == [r.bracketed for r in plain]

    print(f"{FLAGS.export_dir}: {'+'.join(splits)} splits of the NLTK sample, "
          f"{len(word_lists)} sentences (gold words)")
    for every_span, what in ((False, "the parses' constituents"),
                             (True, f"every labelled span of at least "
                                    f"{FLAGS.min_span_probability}")):
        print(f"calibration: {what} by marginal, and the share in the gold tree")
        print("| marginal | constituents | in gold | precision |")
        print("|---|---|---|---|")
        all_n = all_right = 0
        for low, high, n, right in calibration(results, gold_trees, every_span):
            all_n, all_right = all_n + n, all_right + right
            print(f"| {low:.1f}–{high:.1f} | {n} | {right} | {100 * right / n:.1f}% |"
                  if n else f"| {low:.1f}–{high:.1f} | 0 | 0 | – |")
        weighted = sum(c.probability for result in results
                       for c in (result.span_marginals if every_span else result.constituents))
        gold = sum(sum(gold_constituents(tree).values()) for tree in gold_trees)
        print(f"all: {all_n} constituents, {100 * all_right / all_n:.1f}% in gold; mean "
              f"marginal {100 * weighted / all_n:.1f}%; {100 * all_right / gold:.1f}% of the "
              f"gold constituents")

    ways = [("default", parser, {}), ("marginals", parser, {"marginals": True}),
            ("k_best", parser, {"k_best": True}), ("span_marginals", parser, span_options)]
    if FLAGS.before_export_dir:
        ways.insert(0, ("default, export before marginals", Parser(FLAGS.before_export_dir),
                        {}))
    seconds = collections.defaultdict(list)
    for _ in range(FLAGS.repeats):
        for name, way, options in ways:
            seconds[name].append(timed(lambda: way.parse_each(
                word_lists, FLAGS.batch_size, **options)))
    print(f"speed, batch {FLAGS.batch_size}, best of {FLAGS.repeats} (alternating):")
    best = {name: min(values) for name, values in seconds.items()}
    for name, value in best.items():
        print(f"  {name}: {len(word_lists) / value:.1f} sentences/s")
    if FLAGS.before_export_dir:
        print(f"  default / before: {best['default'] / best[ways[0][0]]:.3f}× the time")
    for name in ("marginals", "k_best", "span_marginals"):
        print(f"  {name} cost {1000 * (best[name] - best['default']) / len(word_lists):.2f}"
              f" ms per sentence ({best[name] / best['default']:.2f}× the default's time)")

    words = [word for sentence in word_lists for word in sentence]
    print("growth with length, one sentence at batch 1, best of "
          f"{FLAGS.repeats} (ms): | words | default | marginals | added | k_best | added "
          f"| span_marginals | added |")
    for n in LENGTHS:
        sentence = [words[:n]]
        row = []
        for options in ({}, {"marginals": True}, {"k_best": True}, span_options):
            parser.parse_each(sentence, **options)  # warm
            row.append(min(timed(lambda: parser.parse_each(sentence, **options))
                           for _ in range(FLAGS.repeats)))
        default, *others = (1000 * t for t in row)
        print(f"| {n} | {default:.1f} | "
              + " | ".join(f"{t:.1f} | {t - default:.1f}" for t in others) + " |")
    return 0


if __name__ == "__main__":
    flags.DEFINE_string("export_dir", None, "The exported SavedModel (models/tetra/1).")
    flags.DEFINE_string("before_export_dir", None,
                        "An export of the same model made before parse_marginals existed, "
                        "to compare the default signature's speed with.")
    flags.DEFINE_string("splits", "dev,test", "The NLTK sample's splits, comma-separated.")
    flags.DEFINE_integer("batch_size", 64, "Sentences per model call.", lower_bound=1)
    flags.DEFINE_float("min_span_probability", 0.01,
                       "parse_span_marginals' floor: the least probability of the labelled "
                       "spans it lists.", lower_bound=0.0, upper_bound=1.0)
    flags.DEFINE_integer("repeats", 3, "Timed runs of each way (the best counts).",
                         lower_bound=1)
    cli.run(main)
