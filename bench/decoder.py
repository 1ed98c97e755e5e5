"""Benchmarks the tetra-tag decoders against a per-sentence beam search of the reference kind.

For a batch of 64 sentences of n words each (random scores; vocabularies of NL leaf and NI
internal tags; depth cap 8), prints ms per batch of:

* graph: `decoding.make_decoder(jit_compile=False)`, a plain TF graph (TF Serving path);
* XLA: `decoding.make_decoder(jit_compile=True)`;
* NumPy: `decoding.decode_numpy`, batched;
* per-sentence: `reference_beam_search` below, one sentence at a time with a Python loop
  over the 2n−1 actions and one beam entry per depth, like the reference implementation's
  decoder (for long sentences it is timed on fewer sentences and scaled to the batch).

All are warmed up (traced, compiled) first and timed as the median of a few runs; the
per-sentence decoder's output is checked against the batched decoders.

Usage: python bench/decoder.py [--quick] [--batch_size=64] [--repeats=5]
Exit codes: 0 success, 1 failure (e.g. decoders disagree), 2 usage error.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
import tensorflow as tf  # noqa: E402

from tetra_tf.decode import decoding  # noqa: E402
from bench.reference_decoder import reference_beam_search  # noqa: E402

_QUICK = flags.DEFINE_bool("quick", False, "Smaller sweep and fewer repeats.")
_BATCH_SIZE = flags.DEFINE_integer("batch_size", 64, "Sentences per batch.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed runs per measurement (median).")
_LEAF_VOCAB = flags.DEFINE_integer("leaf_vocab_size", 40, "NL, leaf tags.")
_INTERNAL_VOCAB = flags.DEFINE_integer("internal_vocab_size", 85, "NI, internal tags.")
_MAX_STACK_DEPTH = flags.DEFINE_integer("max_stack_depth", 8, "Depth cap d.")
_REFERENCE_SECONDS = flags.DEFINE_float(
    "reference_seconds", 2.0,
    "Rough time budget per length for the per-sentence decoder (fewer sentences, scaled).")

LENGTHS = (10, 25, 50, 100, 200, 400, 1000)
QUICK_LENGTHS = (10, 50, 200)
RATIO_LENGTH = 50


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def _random_inputs(rng, batch_size, n, num_leaf, num_internal):
    def log_softmax(x):
        x = x - x.max(axis=-1, keepdims=True)
        return (x - np.log(np.exp(x).sum(axis=-1, keepdims=True))).astype(np.float32)

    leaf = log_softmax(3 * rng.standard_normal((batch_size, n, num_leaf)))
    internal = log_softmax(3 * rng.standard_normal((batch_size, n, num_internal)))
    return leaf, internal, np.full(batch_size, n, dtype=np.int32)


def main(argv):
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    batch_size, d = _BATCH_SIZE.value, _MAX_STACK_DEPTH.value
    num_leaf, num_internal = _LEAF_VOCAB.value, _INTERNAL_VOCAB.value
    if batch_size < 1 or d < 1 or num_leaf < 2 or num_internal < 2 or _REPEATS.value < 1:
        print("error: batch_size, max_stack_depth, repeats ≥ 1 and vocab sizes ≥ 2 needed",
              file=sys.stderr)
        return 2
    quick = _QUICK.value
    repeats = 3 if quick else _REPEATS.value
    rng = np.random.default_rng(0)
    leaf_directions = np.arange(num_leaf) % 2
    internal_directions = np.arange(num_internal) % 2
    graph = decoding.make_decoder(leaf_directions, internal_directions, d, jit_compile=False)
    xla = decoding.make_decoder(leaf_directions, internal_directions, d, jit_compile=True)

    print(f"batch {batch_size}, NL={num_leaf}, NI={num_internal}, d={d}, median of "
          f"{repeats}; {tf.config.list_logical_devices()[0].device_type}, "
          f"TF {tf.__version__}, {os.cpu_count()} CPUs")
    header = (f"{'n':>5} | {'graph':>9} {'XLA':>9} {'NumPy':>9} {'per-sent':>10} | "
              f"{'graph':>7} {'XLA':>7} {'NumPy':>7} {'per-sent':>8} | {'per-sent/graph':>14}")
    print(f"{'':>5} | {'ms per batch':^41} | {'µs per word':^33} |")
    print(header)
    print("-" * len(header))
    rows = {}
    for n in (QUICK_LENGTHS if quick else LENGTHS):
        leaf, internal, lengths = _random_inputs(rng, batch_size, n, num_leaf, num_internal)
        tensors = (tf.constant(leaf), tf.constant(internal), tf.constant(lengths))
        run_graph = lambda: [x.numpy() for x in graph(*tensors)]  # noqa: E731
        run_xla = lambda: [x.numpy() for x in xla(*tensors)]  # noqa: E731
        run_numpy = lambda: decoding.decode_numpy(  # noqa: E731
            leaf, internal, lengths, leaf_directions, internal_directions, d)
        expected = run_numpy()
        for name, fn in (("graph", run_graph), ("XLA", run_xla)):
            got = fn()  # warm-up: trace and compile
            if not (np.array_equal(got[0], expected.leaf_tag_ids)
                    and np.array_equal(got[1], expected.internal_tag_ids)):
                print(f"error: {name} decoder disagrees with NumPy at n={n}", file=sys.stderr)
                return 1
        ms_graph = _median_ms(run_graph, repeats)
        ms_xla = _median_ms(run_xla, repeats)
        ms_numpy = _median_ms(run_numpy, repeats)

        # The per-sentence decoder: ~0.12 ms per word, so long sentences use fewer rows.
        num_sentences = int(np.clip(_REFERENCE_SECONDS.value / (n * 130e-6), 2, batch_size))
        if quick:
            num_sentences = min(num_sentences, 8)
        # The per-sentence decoder sums in float64; check it against float64 DP decoding (in
        # float32, rounding may swap near-tied sequences).
        expected64 = decoding.decode_numpy(leaf.astype(np.float64), internal.astype(np.float64),
                                           lengths, leaf_directions, internal_directions, d)
        start = time.perf_counter()
        for row in range(num_sentences):
            score, leaf_ids, internal_ids = reference_beam_search(
                leaf[row], internal[row], leaf_directions, internal_directions, d)
            if (leaf_ids != expected64.leaf_tag_ids[row].tolist()
                    or internal_ids != expected64.internal_tag_ids[row, :n - 1].tolist()):
                print(f"error: per-sentence decoder disagrees at n={n}, row {row}",
                      file=sys.stderr)
                return 1
        ms_reference = 1000 * (time.perf_counter() - start) / num_sentences * batch_size
        scaled = "*" if num_sentences < batch_size else " "

        words = batch_size * n
        rows[n] = (ms_graph, ms_xla, ms_numpy, ms_reference)
        print(f"{n:>5} | {ms_graph:9.2f} {ms_xla:9.2f} {ms_numpy:9.2f} {ms_reference:9.1f}"
              f"{scaled} | {1000 * ms_graph / words:7.2f} {1000 * ms_xla / words:7.2f} "
              f"{1000 * ms_numpy / words:7.2f} {1000 * ms_reference / words:8.1f} | "
              f"{ms_reference / ms_graph:13.1f}×", flush=True)
    print("* per-sentence time measured on fewer sentences and scaled to the batch")
    if RATIO_LENGTH in rows:
        ms_graph, ms_xla, ms_numpy, ms_reference = rows[RATIO_LENGTH]
        print(f"n={RATIO_LENGTH}, ms per sentence: graph {ms_graph / batch_size:.3f}, XLA "
              f"{ms_xla / batch_size:.3f}, NumPy {ms_numpy / batch_size:.3f}, per-sentence "
              f"{ms_reference / batch_size:.3f}; per-sentence / graph = "
              f"{ms_reference / ms_graph:.1f}×, per-sentence / XLA = "
              f"{ms_reference / ms_xla:.1f}× (goal ≥ 10×)")
    return 0


if __name__ == "__main__":
    app.run(main)
