"""Times two start-up and scoring costs that the tests used to bound, each beside a baseline.

* loading the default encoder: `encoders.load_pretrained_encoder()` (build the Keras
  BertEncoderV2, copy the weights in) against reading its model.safetensors with
  safetensors.numpy alone; goal: under 10 s;
* scoring: `evalb.evaluate_lines` (EVALB COLLINS.prm rules) on 2,500 random gold/predicted
  tree pairs of 5-45 words, against reading the same lines with nltk.Tree.fromstring;
  goal: under 5 s.

Each is the median of --repeats runs (after one warm-up for the scorer).

Usage: python bench/load_and_score.py [--repeats=3]
Exit codes: 0 success, 1 failure (scoring disagreed with its inputs), 2 usage error.
"""

from __future__ import annotations

import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tetra_tf import train_extra  # noqa: E402,F401  (first: Keras 2 before TensorFlow loads)

import nltk  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from tetra_tf.training import encoders  # noqa: E402
from tetra_tf.trees import evalb

_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs per measurement (median).")
NUM_PAIRS = 2500
LOAD_GOAL_S, SCORE_GOAL_S = 10.0, 5.0


def _median_s(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _random_tree(rng, words, labels=("NP", "VP", "PP", "S", "SBAR", "ADJP")):
    if len(words) == 1:
        return nltk.Tree(rng.choice(("NN", "DT", "VB", "IN")), [words[0]])
    cut = rng.randint(1, len(words) - 1)
    return nltk.Tree(rng.choice(labels), [_random_tree(rng, words[:cut], labels),
                                          _random_tree(rng, words[cut:], labels)])


def _row(name: str, seconds: float, baseline_name: str, baseline: float, goal: float) -> str:
    met = "met" if seconds < goal else "NOT met"
    return (f"{name:<34} {seconds:8.3f} s | {baseline_name:<30} {baseline:8.3f} s | "
            f"{seconds / baseline:6.1f}× | goal < {goal:g} s {met}")


def main(argv) -> int:
    if len(argv) > 1:
        print(f"error: unexpected arguments {argv[1:]}", file=sys.stderr)
        return 2
    repeats = _REPEATS.value
    if repeats < 1:
        print("error: --repeats must be ≥ 1", file=sys.stderr)
        return 2
    from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel

    weights_path = os.path.join(encoders.default_encoder_dir(), encoders.SAFETENSORS_FILE)
    print(f"median of {repeats}; {os.cpu_count()} CPUs")
    read_s = _median_s(lambda: load_file(weights_path), repeats)
    load_s = _median_s(encoders.load_pretrained_encoder, repeats)
    print(_row("load all-MiniLM-L6-v2 (Keras)", load_s, "read its safetensors", read_s,
               LOAD_GOAL_S))

    rng = random.Random(0)
    gold, pred = [], []
    for _ in range(NUM_PAIRS):
        words = [f"w{i}" for i in range(rng.randint(5, 45))]
        gold.append(str(nltk.Tree("TOP", [_random_tree(rng, words)])).replace("\n", " "))
        pred.append(str(nltk.Tree("TOP", [_random_tree(rng, words)])).replace("\n", " "))
    result = evalb.evaluate_lines(gold, pred)  # warm-up, and a check of the inputs
    if result.counts.valid_sentences != NUM_PAIRS:
        print(f"error: {NUM_PAIRS - result.counts.valid_sentences} pairs not scored",
              file=sys.stderr)
        return 1
    parse_s = _median_s(lambda: [nltk.Tree.fromstring(line) for line in gold + pred], repeats)
    score_s = _median_s(lambda: evalb.evaluate_lines(gold, pred), repeats)
    print(_row(f"score {NUM_PAIRS:,} tree pairs", score_s, "read them with nltk", parse_s,
               SCORE_GOAL_S))
    return 0


if __name__ == "__main__":
    app.run(main)
