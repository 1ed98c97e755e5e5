"""Training speed: the default train step against the same step compiled with XLA
(`python -m tetra_tf.train --jit_compile`), or in bfloat16 mixed precision
(`--mixed_precision=bfloat16`), side by side on the same batches.

  python bench/train_step.py [--train_data=data/ptb_sample/train] [--encoder=DIR]
      [--against=xla|bfloat16] [--steps=20] [--repeats=2] [--lengths=16,32,48]
      [--intra_op_threads=N]

Two trainers of the same recipe (`tetra_tf.train.TrainingConfig` defaults, the same initial
weights) take turns on the same static-shape batches of each bucket length, `--steps`
steps per turn, `--repeats` turns each; the best turn counts. Printed per bucket length:
the first step (tracing, and for XLA compiling, which happens once per shape and run),
milliseconds per step, and the ratio. Then one epoch of the data estimated from its
bucket mix: the default path runs every batch (the last of a bucket partial), XLA the
full batches only (static shapes drop the rest, a different remainder each epoch); with
compile times counted once, as in a run. bfloat16 runs every batch, as the default does.

Dev scoring, checkpoints and the input pipeline are left out: this is the step alone.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tetra_tf import train_extra  # noqa: E402,F401  (first: Keras 2 before TensorFlow loads)

from absl import app, flags  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from tetra_tf import cpu  # noqa: E402
from tetra_tf.data import input_pipeline
from tetra_tf.training import encoders
from tetra_tf.training import trainer as train
from tetra_tf.trees.tags import TagVocabularies  # noqa: E402

_TRAIN_DATA = flags.DEFINE_string("train_data", "data/ptb_sample/train",
                                  "Converted training data (`make data`).")
_ENCODER = flags.DEFINE_string("encoder", None, "Pretrained BERT (default: all-MiniLM-L6-v2).")
_STEPS = flags.DEFINE_integer("steps", 20, "Timed steps per turn.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Turns per path and length; the best counts.")
_LENGTHS = flags.DEFINE_list("lengths", [], "Bucket lengths to time (default: every bucket "
                             "with a full batch).")
_INTRA = flags.DEFINE_integer("intra_op_threads", 0, "TF intra-op threads (0: TF's default).")
_AGAINST = flags.DEFINE_enum("against", "xla", ["xla", "bfloat16"], "What the default step "
                             "is timed against: the step compiled with XLA, or in bfloat16 "
                             "mixed precision (worth it on CPUs with AVX-512 BF16 or AMX).")


def make_trainer(pretrained, vocabs: TagVocabularies, config: train.TrainingConfig,
                 weights: list | None) -> train.Trainer:
    """A trainer of the recipe's model; `weights` (another trainer's initial ones) if given."""
    heads = train.heads_config(vocabs, config)
    model = train.build_tagger(train.TaggerSpec(pretrained.config, heads,
                                                config.max_stack_depth), pretrained.encoder)
    if weights is not None:
        model.set_weights(weights)
    return train.Trainer(model, config, total_steps=10_000,
                         strategy=tf.distribute.get_strategy())


def timed(step, batches: list[dict], steps: int) -> float:
    """Seconds for `steps` steps over the batches (cycled), the last loss fetched."""
    start = time.perf_counter()
    loss = None
    for i in range(steps):
        loss = step(batches[i % len(batches)])
    float(loss)
    return time.perf_counter() - start


def main(argv):
    del argv
    if _INTRA.value:
        tf.config.threading.set_intra_op_parallelism_threads(_INTRA.value)
    vocabs = TagVocabularies.load(_TRAIN_DATA.value)
    base = train.TrainingConfig()
    pretrained = encoders.load_pretrained_encoder(_ENCODER.value)
    tokenizer = pretrained.config.tokenizer(pretrained.vocab_path)
    input_config = input_pipeline.InputConfig(batch_size=base.batch_size, static_shapes=True)
    tokenized, summary = train.load_training_data(_TRAIN_DATA.value, vocabs, tokenizer,
                                                  input_config, "--train_data")
    by_length: dict[int, list[dict]] = {}
    for batch in input_pipeline.training_dataset(tokenized, tokenizer, input_config, summary,
                                                 seed=1):
        inputs = {key: value for key, value in batch.items() if key not in ("words", "tree")}
        by_length.setdefault(int(batch["input_word_ids"].shape[-1]), []).append(inputs)
    lengths = [int(x) for x in _LENGTHS.value] or sorted(by_length)

    tf_keras.utils.set_random_seed(1)
    trainers = {"default": make_trainer(pretrained, vocabs, base, None)}
    initial = trainers["default"].model.get_weights()
    other = _AGAINST.value
    name = {"xla": "XLA", "bfloat16": "bfloat16"}[other]
    paths = ("default", other)
    if other == "xla":
        trainers[other] = make_trainer(encoders.load_pretrained_encoder(_ENCODER.value), vocabs,
                                       train.TrainingConfig(jit_compile=True), initial)
    else:
        # Layers take the policy when built, as in `train.train`.
        tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
        trainers[other] = make_trainer(encoders.load_pretrained_encoder(_ENCODER.value), vocabs,
                                       train.TrainingConfig(mixed_precision="bfloat16"),
                                       initial)
        tf_keras.mixed_precision.set_global_policy("float32")

    print(f"{cpu.describe()}; TF {tf.__version__}; intra-op threads "
          f"{tf.config.threading.get_intra_op_parallelism_threads()} (0: default); "
          f"batch {base.batch_size}, {_STEPS.value} steps x {_REPEATS.value} turns")
    print(f"| bucket length | batches in an epoch (default / {name}) | first step: default s | "
          f"first step: {name} s | default ms/step | {name} ms/step | {name} speed-up |")
    print("|---|---|---|---|---|---|---|")
    epoch = {path: 0.0 for path in paths}
    first_total = {path: 0.0 for path in paths}
    for i, length in enumerate(input_config.bucket_lengths):
        if length not in lengths or length not in by_length:
            continue
        batches = by_length[length]
        first, best = {}, {}
        for path in paths:
            first[path] = timed(trainers[path].train_step, batches, 1)
        for _ in range(_REPEATS.value):
            for path in paths:
                seconds = timed(trainers[path].train_step, batches, _STEPS.value) / _STEPS.value
                best[path] = min(best.get(path, seconds), seconds)
        size = summary.bucket_sizes[i]
        counts = {"default": -(-size // base.batch_size),
                  other: size // base.batch_size if other == "xla" else -(-size // base.batch_size)}
        for path in paths:
            epoch[path] += counts[path] * best[path]
            first_total[path] += first[path]
        print(f"| {length} | {counts['default']} / {counts[other]} | {first['default']:.1f} | "
              f"{first[other]:.1f} | {1000 * best['default']:.0f} | {1000 * best[other]:.0f} | "
              f"{best['default'] / best[other]:.2f}x |", flush=True)
    print(f"one epoch of the buckets timed: default {epoch['default']:.0f} s, {name} "
          f"{epoch[other]:.0f} s ({epoch['default'] / epoch[other]:.2f}x); first steps "
          f"(once per run): default {first_total['default']:.0f} s, {name} "
          f"{first_total[other]:.0f} s")
    return 0


if __name__ == "__main__":
    app.run(main)
