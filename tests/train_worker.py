"""Runs a few training steps in a fresh process, for the distribution tests.

  python tests/train_worker.py compare ENCODER_DIR TRAIN_DIR OUT.json
      Same batches, same initial weights: default strategy, then MirroredStrategy over two
      logical CPUs; writes both runs' losses and how far their final weights (and their
      averages, --ema_decay) are apart.
"""

import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

import numpy as np  # noqa: E402

from tetra_tf.data import input_pipeline
from tetra_tf.data.tokenization import SubwordTokenizer  # noqa: E402
from tetra_tf.training import encoders  # noqa: E402
from tetra_tf.training import model_dir
from tetra_tf.training import trainer as train
from tetra_tf.training.model import HeadsConfig  # noqa: E402
from tetra_tf.trees.tags import TagVocabularies  # noqa: E402

STEPS = 3  # All at positive learning rates (warmup 1 step, then decay over 10).


def run(strategy, encoder_dir, data_dir, initial_weights, batches):
    vocabs = TagVocabularies.load(data_dir)
    with strategy.scope():
        pretrained = encoders.load_pretrained_encoder(encoder_dir)
        heads = HeadsConfig(len(vocabs.leaf), len(vocabs.internal), len(vocabs.pos), 0.0)
        model = model_dir.build_tagger(model_dir.TaggerSpec(pretrained.config, heads, 8),
                                   pretrained.encoder)
        if initial_weights is not None:
            model.set_weights(initial_weights)
        trainer = train.Trainer(model, train.TrainingConfig(warmup_steps=1, ema_decay=0.5),
                                total_steps=10, strategy=strategy)
    start = model.get_weights()
    losses = []
    for batch in batches:
        distributed = strategy.experimental_distribute_values_from_function(
            lambda ctx, b=batch: _shard(b, ctx))
        losses.append(float(trainer.train_step(distributed)))
    averages = [a.numpy().astype(np.float64) for a in trainer.weight_average.averages]
    lag = max(float(np.max(np.abs(a - v.numpy()))) for a, v in
              zip(averages, trainer.encoder_variables + trainer.head_variables))
    return start, losses, [w.astype(np.float64) for w in model.get_weights()], (averages, lag)


def _shard(batch, ctx):
    n = ctx.num_replicas_in_sync
    size = len(batch["num_words"]) // n
    i = ctx.replica_id_in_sync_group
    return {k: v[i * size:(i + 1) * size] for k, v in batch.items()}


def main():
    _, mode, encoder_dir, data_dir, out = sys.argv
    assert mode == "compare"
    pretrained = encoders.load_pretrained_encoder(encoder_dir)
    tokenizer = SubwordTokenizer(pretrained.vocab_path, lower_case=True)
    data = input_pipeline.tokenize_examples(input_pipeline.read_examples(data_dir), tokenizer)
    # Full batches of one shape: each of the two replicas takes half of every batch, and
    # each strategy traces its step once.
    config = input_pipeline.InputConfig(batch_size=8, bucket_lengths=(64,), static_shapes=True)
    summary = input_pipeline.summarize(data, config)
    dataset = input_pipeline.training_dataset(data, tokenizer, config, summary, seed=0)
    batches = [{k: v.numpy() for k, v in train.model_inputs(b).items()}
               for _, b in zip(range(STEPS), dataset)]
    start, single_losses, single, single_averages = run(
        tf.distribute.get_strategy(), encoder_dir, data_dir, None, batches)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    _, mirrored_losses, multi, multi_averages = run(mirrored, encoder_dir, data_dir, start,
                                                    batches)
    moved = max(float(np.max(np.abs(a - b))) for a, b in zip(single, start))
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(single, multi))
    average_diff = max(float(np.max(np.abs(a - b)))
                       for a, b in zip(single_averages[0], multi_averages[0]))
    average_moved = single_averages[1]
    with open(out, "w") as f:
        json.dump({"single_losses": single_losses, "mirrored_losses": mirrored_losses,
                   "replicas": mirrored.num_replicas_in_sync, "max_weight_change": moved,
                   "max_weight_difference": diff, "max_average_difference": average_diff,
                   "max_average_lag": average_moved}, f)


if __name__ == "__main__":
    main()
