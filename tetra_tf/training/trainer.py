r"""Trains the tetra-tagger on TFRecords from tools/convert_ptb.py, with tf.distribute.

The library of `python -m tetra_tf.train` (tetra_tf/train.py, whose docstring is the
program's --help).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Callable, Iterator

from tetra_tf import train_extra  # noqa: F401  (first: the [train] extra, Keras 2)

from absl import flags, logging
import nltk
import numpy as np
import tensorflow as tf
import tf_keras
from tqdm import tqdm

from tetra_tf import cli
from tetra_tf.data import input_pipeline, records
from tetra_tf.data.tokenization import SubwordTokenizer
from tetra_tf.decode import decoding
from tetra_tf.errors import InputError
from tetra_tf.training import encoders, model_card
from tetra_tf.training import model_dir as model_dir_lib
from tetra_tf.training.model import ENCODER_INPUTS, HeadsConfig, TetraTagger, tagging_loss_terms
from tetra_tf.training.model_dir import TaggerSpec, build_tagger
from tetra_tf.trees import scoring
from tetra_tf.trees.tags import TagVocabularies, tags_to_tree

MODEL_INPUTS = ENCODER_INPUTS + ("word_end_positions",)

# The library's parameters that the program's flags of other names give (cli.run).
FLAG_NAMES = {"data_dir": "evaluate"}


@dataclasses.dataclass
class TrainingConfig:
    """The training recipe. The defaults are the project's CPU recipe for MiniLM, chosen
    over three seeds with bench/seeds.py (docs/benchmarks.md, "Recipes over seeds")."""

    epochs: int = 20
    batch_size: int = 16
    learning_rate: float = 2e-4
    layer_decay: float = 1.0
    head_learning_rate: float = 1e-3
    warmup_steps: int = 200
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    dropout_rate: float = 0.1
    mixed_layers: int = 1
    internal_uses_next_word: bool = True
    ema_decay: float = 0.0
    distillation_weight: float = 0.0
    label_smoothing: float = 0.1
    pos_loss_weight: float = 1.0
    keep: str = "last"
    max_stack_depth: int = decoding.DEFAULT_MAX_STACK_DEPTH
    checkpoint_every_steps: int = 200
    seed: int = 1
    jit_compile: bool = False
    mixed_precision: str = "none"


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process keeps the checkpoints and logs (always, unless multi-worker)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or isinstance(strategy, tf.distribute.TPUStrategy):
        return True
    cluster = resolver.cluster_spec().as_dict()
    if not cluster:
        return True
    if "chief" in cluster:
        return resolver.task_type == "chief"
    return resolver.task_type in (None, "worker") and (resolver.task_id or 0) == 0


def get_strategy(tpu: str | None, strategy: str) -> tf.distribute.Strategy:
    """Returns the distribution strategy the flags ask for (TPUStrategy when --tpu is set)."""
    if tpu:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu="" if tpu == "local" else tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if strategy == "default":
        return tf.distribute.get_strategy()
    if strategy == "mirrored":
        return tf.distribute.MirroredStrategy()
    if strategy == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise InputError(f"unknown strategy {strategy!r}: use default, mirrored or multi_worker",
                     ["strategy"])


KEEP_CHOICES = ("best", "last")
MAX_WARMUP_FRACTION = 0.1
MIN_TRAINING_STEPS = 2


def effective_warmup_steps(warmup_steps: int, total_steps: int) -> int:
    """The configured warmup, shortened to at most a tenth of a short run.

    A 200-step warmup in a 219-step run would leave almost nothing for the decay.
    """
    return max(0, min(warmup_steps, int(total_steps * MAX_WARMUP_FRACTION)))


def plan_warmup(config: TrainingConfig, total_steps: int) -> int:
    """Checks that the run's learning rates can move the weights; returns the warmup steps.

    Raises InputError when nothing would be learned (negative or only zero peaks, fewer
    than 2 steps: the schedule's last step has rate 0) or the warmup is negative; says on
    stderr when the warmup is shortened or one part of the model stays frozen.
    """
    for name, peak in (("learning_rate", config.learning_rate),
                       ("head_learning_rate", config.head_learning_rate)):
        if not peak >= 0.0:  # Also catches NaN.
            raise InputError(f"{name}={peak}: a peak learning rate must be >= 0", [name])
    if config.warmup_steps < 0:
        raise InputError(f"warmup_steps={config.warmup_steps}: must be >= 0", ["warmup_steps"])
    if config.learning_rate == 0.0 and config.head_learning_rate == 0.0:
        raise InputError("learning_rate and head_learning_rate are both 0: nothing would be "
                         "learned", ["learning_rate", "head_learning_rate"])
    if total_steps < MIN_TRAINING_STEPS:
        raise InputError(
            f"epochs={config.epochs} makes {max(total_steps, 0)} training step(s) of "
            f"{config.batch_size} sentences: at least {MIN_TRAINING_STEPS} are needed, as the "
            "learning rate decays to 0 at a run's last step", ["epochs"])
    for what, flag, peak in (("encoder weights", "--learning_rate", config.learning_rate),
                             ("tag head weights", "--head_learning_rate",
                              config.head_learning_rate)):
        if peak == 0.0:
            _notice(f"warning: {flag}=0: the {what} stay frozen")
    warmup = effective_warmup_steps(config.warmup_steps, total_steps)
    if warmup < config.warmup_steps:
        _notice(f"warmup shortened from {config.warmup_steps} to {warmup} steps "
                f"(at most a tenth of the run's {total_steps} steps)")
    return warmup


def _notice(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class WarmupLinearDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
    """Rises linearly to `peak` at the last warmup step, then decays linearly to 0 at the
    last step of the run.

    `step` is the optimizer's iteration count before the update (0 for the first step), so
    the first update uses peak / warmup_steps (peak itself without warmup) and the update
    at step total_steps - 1 uses exactly 0; every update in between has a positive rate.
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int):
        super().__init__()
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        peak_step = float(max(self.warmup_steps - 1, 0))
        rising = self.peak * (step + 1.0) / max(float(self.warmup_steps), 1.0)
        falling = self.peak * (self.total_steps - 1.0 - step) / max(
            self.total_steps - 1.0 - peak_step, 1.0)
        rate = tf.where(step < peak_step, rising, falling)
        return tf.clip_by_value(rate, 0.0, self.peak)

    def get_config(self) -> dict:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps}


def make_optimizer(peak: float, weight_decay: float, warmup_steps: int, total_steps: int,
                   name: str) -> tf_keras.optimizers.Optimizer:
    """AdamW (BERT's settings; no decay of LayerNorm weights or biases) on a warmup-then-
    linear-decay schedule peaking at `peak` after `warmup_steps`, 0 at `total_steps`."""
    optimizer = tf_keras.optimizers.AdamW(
        learning_rate=WarmupLinearDecay(peak, warmup_steps, total_steps),
        weight_decay=weight_decay, beta_1=0.9, beta_2=0.999, epsilon=1e-6, name=name)
    optimizer.exclude_from_weight_decay(
        var_names=["LayerNorm", "layer_norm", "bias", "scalar_mix"])
    return optimizer


class WeightAverage(tf.Module):
    """An exponential moving average of the trainable weights, which evaluation, the kept
    checkpoints and so the export use in place of the raw weights.

    The decay ramps up as min(decay, (1 + t) / (10 + t)) at step t, so that the first
    steps do not leave the average stuck near the initial (pretrained or random) weights.
    """

    def __init__(self, variables: list[tf.Variable], decay: float):
        """Args:
          variables: the weights to average; `update` and `swapped_in` take them again
            (the module holds only the averages, so a checkpoint saves each weight once).
          decay: the decay's upper bound.
        """
        super().__init__(name="weight_average")
        self.decay = decay
        # Every replica holds the same weights after an update, so each averages its own
        # copy with no communication (as metrics do); reading one gives the first replica's.
        self.averages = [tf.Variable(v.read_value(), trainable=False,
                                     name=v.name.split(":")[0].replace("/", "_") + "_average",
                                     synchronization=tf.VariableSynchronization.ON_READ,
                                     aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                         for v in variables]

    def update(self, variables: list[tf.Variable], step: tf.Tensor) -> None:
        """Moves the averages towards the current weights (in the train step)."""
        step = tf.cast(step, tf.float32)
        decay = tf.minimum(self.decay, (1.0 + step) / (10.0 + step))
        for average, variable in zip(self.averages, variables):
            average.assign_sub((1.0 - decay) * (average - tf.cast(variable, average.dtype)))

    @contextlib.contextmanager
    def swapped_in(self, variables: list[tf.Variable]):
        """Within the block, the variables hold the averages; after it, their own values
        again."""
        saved = [v.numpy() for v in variables]
        for variable, average in zip(variables, self.averages):
            variable.assign(average)
        try:
            yield
        finally:
            for variable, value in zip(variables, saved):
                variable.assign(value)


class Trainer:
    """Owns the model, optimizers and checkpoints of one training run, under a strategy."""

    def __init__(self, model: TetraTagger, config: TrainingConfig, total_steps: int,
                 strategy: tf.distribute.Strategy):
        self.model = model
        self.config = config
        self.strategy = strategy
        warmup_steps = effective_warmup_steps(config.warmup_steps, total_steps)
        if config.layer_decay == 1.0:
            head_ids = {id(v) for v in model.head_variables}
            # The pooler serves sentence classification; tagging never uses it.
            self.encoder_variable_groups = [[v for v in model.trainable_variables
                                             if id(v) not in head_ids
                                             and "pooler" not in v.name]]
        else:
            self.encoder_variable_groups = model.encoder_variable_groups()
        # One optimizer per group, the top layer's at the peak rate, each lower one at
        # layer_decay times the rate of the one above it.
        top = len(self.encoder_variable_groups) - 1
        self.encoder_optimizers = [
            make_optimizer(config.learning_rate * config.layer_decay ** (top - depth),
                           config.weight_decay, warmup_steps, total_steps,
                           "encoder_adamw" if top == 0 else f"encoder_adamw_{depth}")
            for depth in range(top + 1)]
        self.head_optimizer = make_optimizer(
            config.head_learning_rate, config.weight_decay, warmup_steps, total_steps,
            "head_adamw")
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        self.encoder_variables = [v for group in self.encoder_variable_groups for v in group]
        self.head_variables = model.head_variables
        # All optimizers' variables, encoder's first (the gradients are split there).
        self.trained_variables = self.encoder_variables + self.head_variables
        # Build optimizer slots now, in the strategy scope, so checkpoints restore into them.
        for optimizer, group in zip(self.encoder_optimizers, self.encoder_variable_groups):
            optimizer.build(group)
        self.head_optimizer.build(self.head_variables)
        self.weight_average = (WeightAverage(self.trained_variables, config.ema_decay)
                               if config.ema_decay > 0 else None)
        # A nested tf.function is needed for XLA only: MirroredStrategy's all-reduces
        # misbehave inside one. (TPUStrategy compiles the whole replica step anyway.)
        self._replica_step = (tf.function(self._replica_train_step, jit_compile=True)
                              if config.jit_compile else self._replica_train_step)
        # Without XLA, one graph serves every bucket's shape instead of one per bucket.
        self.train_step = tf.function(self._train_step, reduce_retracing=not config.jit_compile)
        self.predict_step = tf.function(self._predict_step,
                                        reduce_retracing=not config.jit_compile)

    def learning_rates(self) -> dict[str, float]:
        """The rates the schedules gave the last update of the encoder's top layer and of
        the heads (the optimizers keep them; evaluating the schedules at `iterations` would
        give the next step's)."""
        top_layer = self.encoder_optimizers[-1]
        return {"encoder": float(tf.convert_to_tensor(top_layer.learning_rate)),
                "heads": float(tf.convert_to_tensor(self.head_optimizer.learning_rate))}

    def checkpoint(self) -> tf.train.Checkpoint:
        parts = {}
        if self.weight_average is not None:
            parts["weight_average"] = self.weight_average
        encoder_optimizer = (self.encoder_optimizers[0] if len(self.encoder_optimizers) == 1
                             else self.encoder_optimizers)
        return tf.train.Checkpoint(model=self.model, encoder_optimizer=encoder_optimizer,
                                   head_optimizer=self.head_optimizer, step=self.step, **parts)

    def evaluated_weights(self):
        """A context in which the model holds the weights to evaluate and keep: the
        averaged ones with --ema_decay, else the trained ones."""
        if self.weight_average is None:
            return contextlib.nullcontext()
        return self.weight_average.swapped_in(self.trained_variables)

    def _replica_train_step(self, batch: dict) -> tf.Tensor:
        context = tf.distribute.get_replica_context()
        inputs = {key: batch[key] for key in MODEL_INPUTS}
        variables = self.trained_variables
        with tf.GradientTape() as tape:
            outputs = self.model(inputs, training=True)
            terms = tagging_loss_terms(outputs, batch, self.config.distillation_weight,
                                       self.config.label_smoothing)
            # Normalize by token counts over the whole global batch, so that the summed
            # replica gradients equal the single-device gradient of the same batch.
            counts = context.all_reduce("sum", tf.stack([count for _, count in terms.values()]))
            sums = tf.stack([loss_sum for loss_sum, _ in terms.values()])
            weights = tf.constant([self.config.pos_loss_weight if key == records.POS_TAG_IDS
                                   else 1.0 for key in terms])
            loss = tf.reduce_sum(weights * sums / tf.maximum(counts, 1.0))
        gradients = tape.gradient(loss, variables)
        if context.num_replicas_in_sync > 1:
            # Dense: all-reducing the embedding's IndexedSlices crashes on CPU collectives.
            gradients = context.all_reduce(
                "sum", [tf.convert_to_tensor(g) for g in gradients])
        gradients, _ = tf.clip_by_global_norm(gradients, self.config.clip_norm)
        start = 0
        for optimizer, group in zip(self.encoder_optimizers, self.encoder_variable_groups):
            end = start + len(group)
            optimizer.apply_gradients(zip(gradients[start:end], variables[start:end]),
                                      skip_gradients_aggregation=True)
            start = end
        split = len(self.encoder_variables)
        self.head_optimizer.apply_gradients(
            zip(gradients[split:], variables[split:]), skip_gradients_aggregation=True)
        if self.weight_average is not None:
            self.weight_average.update(variables, self.step)
        return context.all_reduce("sum", loss)  # Replica losses are shares of the global one.

    def _train_step(self, batch: dict) -> tf.Tensor:
        """Runs one step on every replica; returns the global batch's loss."""
        loss = self.strategy.run(self._replica_step, args=(batch,))
        self.step.assign_add(1)
        return self.strategy.reduce("mean", loss, axis=None)

    def _predict_step(self, inputs: dict) -> dict:
        outputs = self.strategy.run(lambda x: self.model(x, training=False), args=(inputs,))
        return {k: self.strategy.experimental_local_results(v)[0] for k, v in outputs.items()}


def model_inputs(batch: dict) -> dict:
    """The tensors of a batch that go through the accelerator (strings stay on the host)."""
    return {key: value for key, value in batch.items() if key not in (records.WORDS, records.TREE)}


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def predict_trees(predict_fn, batches, vocabs: TagVocabularies,
                  max_stack_depth: int) -> tuple[list[str], list[nltk.Tree]]:
    """Parses evaluation batches with the decoder.

    Args:
      predict_fn: maps model inputs to the model's logits.
      batches: numpy batches from `input_pipeline.evaluation_batches`.
      vocabs: the tag vocabularies.
      max_stack_depth: the decoder's depth cap.

    Returns:
      (gold trees, one line each; predicted trees, with the predicted POS tags).
    """
    leaf_directions = vocabs.leaf.directions()
    internal_directions = vocabs.internal.directions()
    gold, predicted = [], []
    for batch in batches:
        outputs = {k: v.numpy() for k, v in predict_fn(model_inputs(batch)).items()}
        lengths = batch["num_words"]
        result = decoding.decode_numpy(
            log_softmax(outputs["leaf_logits"]), log_softmax(outputs["internal_logits"]),
            lengths, leaf_directions, internal_directions, max_stack_depth)
        pos_ids = outputs["pos_logits"].argmax(-1)
        for row, n in enumerate(lengths):
            if n == 0:
                continue
            words = [w.decode("utf-8") for w in batch[records.WORDS][row, :n]]
            leaf_tags = [vocabs.leaf.tag(i) for i in result.leaf_tag_ids[row, :n]]
            internal_tags = [vocabs.internal.tag(i) for i in result.internal_tag_ids[row, :n - 1]]
            pos_tags = [vocabs.pos.tag(i) for i in pos_ids[row, :n]]
            gold.append(batch[records.TREE][row].decode("utf-8"))
            predicted.append(tags_to_tree(words, pos_tags, leaf_tags, internal_tags))
    return gold, predicted


def load_training_data(data_dir: str | list[str], vocabs: TagVocabularies,
                       tokenizer: SubwordTokenizer, config: input_pipeline.InputConfig,
                       what: str, teacher_log_probs: bool = False):
    """Reads, tokenizes and checks one data directory (or several, as one data set);
    returns (cached dataset, summary). With `teacher_log_probs`, the examples also hold
    their teacher's log-probabilities (records written by tetra_tf.distillation). `what`
    names the data in errors: the caller's parameter that gave it (e.g. train_data)."""
    sizes = records.tag_vocabulary_sizes(vocabs)
    if teacher_log_probs:
        for directory in split_data_dirs(data_dir):
            if not records.has_teacher_log_probs(directory):
                raise InputError(f"{what}: {directory} holds no teacher log-probabilities "
                                 "(write them with python -m tetra_tf.distillation)", [what])
    try:
        tokenized = input_pipeline.tokenize_examples(
            input_pipeline.read_examples(data_dir, sizes if teacher_log_probs else None),
            tokenizer).cache()
        summary = input_pipeline.summarize(tokenized, config)
    except FileNotFoundError as e:
        raise InputError(f"{what}: {e}", [what]) from None
    except tf.errors.DataLossError as e:
        raise InputError(f"{what}: {_names(data_dir)} holds a corrupt TFRecord file "
                         f"({e.message})", [what]) from None
    if summary.num_examples == 0:
        raise InputError(f"{what}: {_names(data_dir)} holds no examples", [what])
    for key, size in sizes.items():
        if summary.max_tag_ids[key] >= size:
            raise InputError(
                f"{what}: {_names(data_dir)} has {key} up to {summary.max_tag_ids[key]}, "
                f"beyond the vocabulary's {size} tags: the records were converted with "
                "another vocabulary", [what])
    return tokenized, summary


def _names(data_dir: str | list[str]) -> str:
    return data_dir if isinstance(data_dir, str) else ",".join(data_dir)


def split_data_dirs(train_data: str | list[str]) -> list[str]:
    """train_data's directories: one, or several joined by commas (e.g. train,dev for a
    final fit on both)."""
    dirs = train_data.split(",") if isinstance(train_data, str) else list(train_data)
    return [d for d in dirs if d]


def check_same_vocabulary(data_dir: str, vocabs: TagVocabularies, what: str) -> None:
    try:
        other = TagVocabularies.load(data_dir)
    except FileNotFoundError:
        return  # Records without vocabulary files: the id range check still applies.
    if other != vocabs:
        raise InputError(
            f"{what}: {data_dir} was converted with another tag vocabulary than the model's; "
            "convert it again with tools/convert_ptb.py --vocab_from=<training data dir>",
            [what])


# What a resumed run may change: how long it runs, what it keeps and how it computes, not
# what it optimizes.
RESUMABLE_CHANGES = ("epochs", "keep", "checkpoint_every_steps", "max_stack_depth",
                     "jit_compile", "mixed_precision")
# The value meaning "off" of options younger than some model directories' records.
_UNRECORDED_MEANS = {"mixed_layers": 1, "ema_decay": 0.0, "distillation_weight": 0.0,
                     "label_smoothing": 0.0, "pos_loss_weight": 1.0, "layer_decay": 1.0,
                     "internal_uses_next_word": False}


def heads_config(vocabs: TagVocabularies, config: TrainingConfig) -> HeadsConfig:
    """The heads of the recipe's model, sized to the tag vocabularies."""
    return HeadsConfig(len(vocabs.leaf), len(vocabs.internal), len(vocabs.pos),
                       config.dropout_rate, config.mixed_layers, config.internal_uses_next_word)


def recipe_began_with(model_dir: str) -> dict | None:
    """The recipe of a model directory's last run from step 0, as TrainingConfig's fields
    (those younger than the record at their "off" values); None before any run."""
    runs = (model_dir_lib.read_json(os.path.join(model_dir, model_dir_lib.TRAINING_FILE))
            or {}).get("runs", [])
    fresh = [run for run in runs if not run.get("resumed_from_step")]
    if not fresh:
        return None
    return {**_UNRECORDED_MEANS, **(fresh[-1].get("recipe") or {})}


def check_resumed_recipe(model_dir: str, spec: TaggerSpec, config: TrainingConfig) -> None:
    """Refuses to resume a run with another recipe than it began with (but for
    RESUMABLE_CHANGES): the result would belong to neither recipe, yet its card would name
    one."""
    for name in ("mixed_layers", "internal_uses_next_word"):  # the model's shape
        if getattr(spec.heads, name) != getattr(config, name):
            raise InputError(f"{model_dir} was trained with {name}="
                             f"{getattr(spec.heads, name)}: resume with the same, or use a "
                             "new model_dir", [name, "model_dir"])
    began = recipe_began_with(model_dir)
    if began is None:
        return
    changed = [name for name, value in dataclasses.asdict(config).items()
               if name not in RESUMABLE_CHANGES and began.get(name, value) != value]
    if changed:
        then = " ".join(f"{name}={began[name]}" for name in changed)
        now = " ".join(f"{name}={getattr(config, name)}" for name in changed)
        raise InputError(f"{model_dir} was trained with {then} (this run: {now}): resume "
                         "with the same, or use a new model_dir", [*changed, "model_dir"])


def prepare_model_dir(model_dir: str, train_data: str, encoder_path: str | None,
                      config: TrainingConfig, write: bool = True):
    """Creates the model directory, or checks it against the data when resuming.

    Args:
      write: False on the non-chief workers of a multi-worker run: they read, never write.

    Returns:
      (vocabs, spec, pretrained encoder or None when resuming).
    """
    vocabs = TagVocabularies.load(train_data)
    vocab_dir = model_dir_lib.vocab_dir(model_dir)
    if os.path.isfile(os.path.join(model_dir, model_dir_lib.CONFIG_FILE)):
        saved = TagVocabularies.load(vocab_dir)
        if saved != vocabs:
            raise InputError(
                f"{model_dir} holds a model trained with another tag vocabulary than "
                f"{train_data}'s; use a new model_dir", ["model_dir"])
        # A run killed before its first checkpoint left nothing to resume: start afresh
        # from the pretrained encoder (not from the random weights of the saved config).
        if tf.train.latest_checkpoint(
                os.path.join(model_dir, model_dir_lib.ROLLING_CHECKPOINT_DIR)):
            spec = TaggerSpec.load(model_dir)
            check_resumed_recipe(model_dir, spec, config)
            return vocabs, spec, None
    pretrained = encoders.load_pretrained_encoder(encoder_path)
    heads = heads_config(vocabs, config)
    if config.mixed_layers > pretrained.config.num_layers:
        raise InputError(f"mixed_layers={config.mixed_layers}: the encoder has only "
                         f"{pretrained.config.num_layers} layers", ["mixed_layers"])
    spec = TaggerSpec(pretrained.config, heads, config.max_stack_depth)
    if not write:
        return vocabs, spec, pretrained
    os.makedirs(model_dir, exist_ok=True)
    vocabs.save(vocab_dir)
    shutil.copyfile(pretrained.vocab_path, model_dir_lib.encoder_vocab_path(model_dir))
    spec.save(model_dir)
    return vocabs, spec, pretrained


def train(train_data: str | list[str], dev_data: str | None, model_dir: str,
          config: TrainingConfig, strategy: tf.distribute.Strategy, encoder_path: str | None = None,
          input_config: input_pipeline.InputConfig | None = None,
          max_steps: int | None = None, progress: bool = True,
          command: str | None = None) -> dict:
    """Trains (or resumes training) and returns a summary of the run.

    Args:
      train_data: a convert_ptb output directory (records and vocabularies), or several
        (a list, or joined by commas) of the same tag vocabulary, trained on as one set.
      dev_data: another one, scored with the decoder and EVALB after each epoch (None:
        no selection; each epoch's weights are kept, so the last epoch's in the end).
      model_dir: where checkpoints, the best model and logs go.
      config: the recipe.
      strategy: the distribution strategy.
      encoder_path: pretrained encoder (None: the default MiniLM).
      input_config: batching; its batch size is overridden by config.batch_size.
      max_steps: stop after this global step (for tests and smoke runs).
      progress: show progress bars.
      command: the command line, recorded in training.json for the model card.
    """
    train_dirs = split_data_dirs(train_data)
    if not train_dirs:
        raise InputError("train_data is empty", ["train_data"])
    for directory in train_dirs:
        if not os.path.isdir(directory):
            raise InputError(f"train_data: {directory} is not a directory (make one with "
                             "tools/convert_ptb.py)", ["train_data"])
    _check_recipe(config)
    # XLA compiles, and TPUs need, one program per shape: keep batch shapes static there.
    static_shapes = config.jit_compile or isinstance(strategy, tf.distribute.TPUStrategy)
    input_config = dataclasses.replace(input_config or input_pipeline.InputConfig(),
                                       batch_size=config.batch_size, static_shapes=static_shapes)
    # Layers take the policy when built; restore it after, for the process's later models.
    previous_policy = tf_keras.mixed_precision.global_policy()
    if config.mixed_precision != "none":
        tf_keras.mixed_precision.set_global_policy(f"mixed_{config.mixed_precision}")
    try:
        run = _prepare_run(train_dirs, dev_data, model_dir, config, strategy, encoder_path,
                           input_config)
        return _train(run, config, strategy, model_dir, max_steps, progress,
                      record=lambda start_step: model_card.record_training_run(
                          model_dir, command, ",".join(train_dirs), dev_data, encoder_path,
                          dataclasses.asdict(config), run.train_summary.num_examples,
                          start_step))
    finally:
        tf_keras.mixed_precision.set_global_policy(previous_policy)


# The recipe's values that train() refuses: field → (the values it takes, what to say).
_RECIPE_RANGES = {
    "ema_decay": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1) (0: no average)"),
    "distillation_weight": (lambda v: 0.0 <= v <= 1.0, "must be in [0, 1] (0: gold tags alone)"),
    "label_smoothing": (lambda v: 0.0 <= v < 1.0, "must be in [0, 1) (0: one-hot gold tags)"),
    "pos_loss_weight": (lambda v: v >= 0.0,
                        "must be >= 0 (0: no POS loss, 1: as much as each tag head's)"),
    "mixed_layers": (lambda v: v >= 1, "must be >= 1 (1: the last layer alone)"),
    "layer_decay": (lambda v: 0.0 < v <= 1.0,
                    "must be in (0, 1] (1: one learning rate for the whole encoder)"),
}


def _check_recipe(config: TrainingConfig) -> None:
    """Raises InputError naming the first field of the recipe out of its range."""
    if config.keep not in KEEP_CHOICES:
        raise InputError(f"keep={config.keep}: use one of {', '.join(KEEP_CHOICES)}", ["keep"])
    for name, (allowed, rule) in _RECIPE_RANGES.items():
        value = getattr(config, name)
        if not allowed(value):
            raise InputError(f"{name}={value}: {rule}", [name])


@dataclasses.dataclass
class _Run:
    """What one training run works on: vocabularies, tokenized data, model and step counts."""

    vocabs: TagVocabularies
    spec: TaggerSpec
    tokenizer: SubwordTokenizer
    input_config: input_pipeline.InputConfig
    train_set: tf.data.Dataset
    train_summary: input_pipeline.DataSummary
    dev_batches: list[dict] | None  # packed once, scored after every epoch
    steps_per_epoch: int
    total_steps: int
    trainer: "Trainer"


def _prepare_run(train_dirs, dev_data, model_dir, config, strategy, encoder_path,
                 input_config) -> _Run:
    """Setup: the model directory, the data (tokenized, checked) and the trainer."""
    with strategy.scope():  # The pretrained encoder's variables must live in the strategy.
        vocabs, spec, pretrained = prepare_model_dir(
            model_dir, train_dirs[0], encoder_path, config, write=is_chief(strategy))
    for directory in train_dirs:
        check_same_vocabulary(directory, vocabs, "train_data")
    encoder_vocab = (pretrained.vocab_path if pretrained
                     else model_dir_lib.encoder_vocab_path(model_dir))
    tokenizer = spec.encoder.tokenizer(encoder_vocab)
    train_set, train_summary = load_training_data(
        train_dirs, vocabs, tokenizer, input_config, "train_data",
        teacher_log_probs=config.distillation_weight > 0)
    if train_summary.too_long:
        logging.warning("%d training sentences exceed %d subwords and are left out",
                        train_summary.too_long, max(input_config.bucket_lengths) - 2)
    dev_batches = None
    if dev_data:
        check_same_vocabulary(dev_data, vocabs, "dev_data")
        dev_set, dev_summary = load_training_data(dev_data, vocabs, tokenizer, input_config,
                                                  "dev_data")
        dev_batches = list(input_pipeline.evaluation_batches(dev_set, tokenizer, input_config,
                                                             dev_summary))

    steps_per_epoch = train_summary.steps_per_epoch(input_config)
    if steps_per_epoch == 0:
        raise InputError(f"train_data: fewer sentences than one batch of {config.batch_size}",
                         ["train_data"])
    total_steps = steps_per_epoch * config.epochs
    plan_warmup(config, total_steps)
    with strategy.scope():
        model = build_tagger(spec, pretrained.encoder if pretrained else None)
        trainer = Trainer(model, config, total_steps, strategy)
    return _Run(vocabs, spec, tokenizer, input_config, train_set, train_summary, dev_batches,
                steps_per_epoch, total_steps, trainer)


def _restore(run: _Run, model_dir: str, chief: bool) -> tf.train.CheckpointManager:
    """Resume: restores the latest rolling checkpoint, if any; returns the manager."""
    checkpoint = run.trainer.checkpoint()
    latest = tf.train.latest_checkpoint(
        os.path.join(model_dir, model_dir_lib.ROLLING_CHECKPOINT_DIR))
    # Every worker takes part in saving; only the chief's copy is kept (TF's recipe).
    save_dir = (os.path.join(model_dir, model_dir_lib.ROLLING_CHECKPOINT_DIR) if chief
                else tempfile.mkdtemp(prefix="tetra_tf_worker_ckpt_"))
    manager = tf.train.CheckpointManager(checkpoint, save_dir, max_to_keep=2)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
        step = int(run.trainer.step.numpy())
        logging.info("resumed from %s at step %d", latest, step)
        print(f"resumed from step {step}", file=sys.stderr, flush=True)
    return manager


def _train_epoch(run: _Run, config: TrainingConfig, strategy: tf.distribute.Strategy,
                 last_step: int, manager: tf.train.CheckpointManager, writer,
                 progress: bool) -> list[float]:
    """Trains from the current step to the end of its epoch (or last_step); returns losses."""
    trainer = run.trainer
    step = int(trainer.step.numpy())
    epoch, done_in_epoch = divmod(step, run.steps_per_epoch)
    dataset = input_pipeline.training_dataset(
        run.train_set, run.tokenizer, run.input_config, run.train_summary,
        seed=config.seed * 1000 + epoch, skip_batches=done_in_epoch).map(model_inputs)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    batches = strategy.experimental_distribute_dataset(dataset.with_options(options))
    if not run.input_config.static_shapes:
        # One graph for every bucket's batches, traced for their spec's unknown lengths at
        # once (called with shape after shape, tf.function traces again until it relaxes).
        trainer.train_step.get_concrete_function(batches.element_spec)
    todo = min(run.steps_per_epoch - done_in_epoch, last_step - step)
    bar = tqdm(total=run.steps_per_epoch, initial=done_in_epoch, disable=not progress,
               desc=f"epoch {epoch + 1}/{config.epochs}", unit="step", file=sys.stderr)
    started, losses = time.time(), []
    for _, batch in zip(range(todo), batches):
        loss = float(trainer.train_step(batch))
        losses.append(loss)
        step = int(trainer.step.numpy())
        rates = trainer.learning_rates()
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{rates['encoder']:.2e}",
                        steps_s=f"{len(losses) / (time.time() - started):.2f}")
        with writer.as_default(step=step):
            tf.summary.scalar("train/loss", loss)
            for part, rate in rates.items():
                tf.summary.scalar(f"train/learning_rate/{part}", rate)
        if step % config.checkpoint_every_steps == 0:
            manager.save(checkpoint_number=step)
    bar.close()
    manager.save(checkpoint_number=step)
    return losses


def _score_dev(run: _Run) -> tuple[float, float]:
    """Dev scoring: (F1 with gold POS, POS accuracy) of the current weights."""
    scores = scoring.score_parses(*predict_trees(
        run.trainer.predict_step, run.dev_batches, run.vocabs, run.spec.max_stack_depth))
    return scores.f1, scores.pos_accuracy


def _train(run: _Run, config: TrainingConfig, strategy: tf.distribute.Strategy,
           model_dir: str, max_steps: int | None, progress: bool, record) -> dict:
    """The loop: epochs of steps, each full epoch scored on dev, the best weights kept."""
    chief = is_chief(strategy)
    manager = _restore(run, model_dir, chief)
    best_path = os.path.join(model_dir, model_dir_lib.BEST_DIR)
    best = (model_dir_lib.read_json(os.path.join(best_path, model_dir_lib.BEST_RECORD_FILE))
            or {"dev_f1": -1.0})
    history = model_dir_lib.read_json(os.path.join(model_dir, model_dir_lib.HISTORY_FILE)) or []
    writer = tf.summary.create_file_writer(
        os.path.join(model_dir, "logs") if chief else tempfile.mkdtemp(prefix="tetra_tf_logs_"))
    start_step = int(run.trainer.step.numpy())
    if chief:
        record(start_step)
    last_step = min(run.total_steps, max_steps or run.total_steps)
    started = time.time()
    while int(run.trainer.step.numpy()) < last_step:
        epoch_started = time.time()
        losses = _train_epoch(run, config, strategy, last_step, manager, writer, progress)
        step = int(run.trainer.step.numpy())
        if step % run.steps_per_epoch:
            continue
        entry = {"epoch": step // run.steps_per_epoch, "step": step,
                 "train_loss": float(np.mean(losses)) if losses else None}
        with run.trainer.evaluated_weights():
            if run.dev_batches is not None:
                entry["dev_f1"], entry["dev_pos_accuracy"] = _score_dev(run)
            entry["epoch_seconds"] = round(time.time() - epoch_started, 1)
            history.append(entry)
            message = f"epoch {entry['epoch']}: loss {entry['train_loss']:.4f}"
            if run.dev_batches is not None:
                with writer.as_default(step=step):
                    tf.summary.scalar("dev/f1", entry["dev_f1"])
                    tf.summary.scalar("dev/pos_accuracy", entry["dev_pos_accuracy"])
                message += (f", dev F1 {entry['dev_f1']:.2f}, "
                            f"dev POS {entry['dev_pos_accuracy']:.2f}")
            if not chief:
                continue
            # --keep=best: the best dev F1 so far; --keep=last (or no dev set): every epoch's
            # weights replace the kept ones, so the run's last epoch is kept.
            if (config.keep == "last" or run.dev_batches is None
                    or entry["dev_f1"] > best.get("dev_f1", -1.0)):
                best = dict(entry)
                tf.train.Checkpoint(model=run.trainer.model).write(
                    os.path.join(model_dir, model_dir_lib.BEST_CHECKPOINT))
                model_dir_lib.write_json(
                    os.path.join(best_path, model_dir_lib.BEST_RECORD_FILE), best)
                message += (" (best)" if config.keep == "best" and run.dev_batches is not None
                            else " (kept)")
        print(message, file=sys.stderr, flush=True)
        model_dir_lib.write_json(os.path.join(model_dir, model_dir_lib.HISTORY_FILE), history)
    writer.close()
    return {"steps": int(run.trainer.step.numpy()), "resumed_from_step": start_step,
            "seconds": time.time() - started, "best": best, "history": history}


@dataclasses.dataclass
class ModelOnData:
    """A trained model ready to score a converted data set, as training scores dev."""

    predict: Callable[[dict], dict]  # model inputs → the heads' logits (tf.function)
    batches: Iterator[dict]  # the data's evaluation batches (numpy), bucket order
    vocabs: TagVocabularies
    spec: TaggerSpec
    num_sentences: int


def load_model_on_data(model_dir: str, data_dir: str, checkpoint: str | None = None,
                       batch_size: int = 32, what: str = "data_dir") -> ModelOnData:
    """Loads a trained model and reads a data set of its tag vocabulary for it.

    Args:
      model_dir: a training model directory (or a checkpoint prefix in one, when
        `checkpoint` is None).
      data_dir: a convert_ptb output directory with the model's tag vocabulary.
      checkpoint: a checkpoint prefix; default the best weights (else the latest).
      batch_size: sentences per batch.
      what: the name of the data in errors (the caller's parameter that gave it).
    """
    if checkpoint is None:
        model_dir, checkpoint = model_dir_lib.resolve_checkpoint(model_dir)
    vocabs = TagVocabularies.load(model_dir_lib.vocab_dir(model_dir))
    check_same_vocabulary(data_dir, vocabs, what)
    model, spec = model_dir_lib.load_tagger(model_dir, checkpoint)
    tokenizer = spec.encoder.tokenizer(model_dir_lib.encoder_vocab_path(model_dir))
    input_config = input_pipeline.InputConfig(batch_size=batch_size)
    data, summary = load_training_data(data_dir, vocabs, tokenizer, input_config, what)
    predict = tf.function(lambda x: model(x, training=False), reduce_retracing=True)
    return ModelOnData(
        predict, input_pipeline.evaluation_batches(data, tokenizer, input_config, summary),
        vocabs, spec, summary.num_examples)


def parse_data(model_dir: str, data_dir: str, checkpoint: str | None = None,
               batch_size: int = 32) -> tuple[list[str], list[nltk.Tree]]:
    """Parses a converted data set with a trained model, as training parses the dev set.

    Args: as `load_model_on_data`'s.

    Returns:
      (gold trees, one line each; predicted trees), sentences in bucket order.
    """
    loaded = load_model_on_data(model_dir, data_dir, checkpoint, batch_size)
    return predict_trees(loaded.predict, loaded.batches, loaded.vocabs,
                         loaded.spec.max_stack_depth)


def evaluate_model(model_dir: str, data_dir: str, checkpoint: str | None = None,
                   batch_size: int = 32) -> dict:
    """Scores a trained model on a converted data set, as training scores the dev set.

    Args: as `parse_data`'s.

    Returns:
      F1 and more with gold POS on the leaves (the standard), F1 with the predicted POS,
      and the POS accuracy.
    """
    if checkpoint is None:
        model_dir, checkpoint = model_dir_lib.resolve_checkpoint(model_dir)
    scores = scoring.score_parses(*parse_data(model_dir, data_dir, checkpoint, batch_size))
    return {"checkpoint": checkpoint, **scores.to_dict()}


FLAGS = flags.FLAGS

# The help of each TrainingConfig field, which is also its flag.
_CONFIG_HELP = {
    "epochs": "Training epochs.",
    "batch_size": "Global batch size, in sentences.",
    "learning_rate": "Peak learning rate of the encoder (0 keeps it frozen).",
    "layer_decay": "Layer-wise decay of the encoder's learning rate: its top layer peaks at "
                   "--learning_rate, each layer below at this times the one above, the "
                   "embeddings lowest, MPNet's shared relative position bias with them (1: "
                   "one rate for the whole encoder).",
    "head_learning_rate": "Peak learning rate of the tag heads.",
    "warmup_steps": "Steps of linear warmup to the peak rates (at most a tenth of the run's "
                    "steps), then linear decay to 0 at the run's last step.",
    "weight_decay": "AdamW weight decay.",
    "clip_norm": "Global gradient norm clip.",
    "dropout_rate": "Dropout before the heads.",
    "mixed_layers": "Word features from a learned scalar mix of the encoder's last N layers "
                    "(1: the last layer alone).",
    "internal_uses_next_word": "Score the internal tag of the fencepost after each word from "
                               "that word's features and the next word's, side by side "
                               "(off: the word before the fencepost alone, as in the paper).",
    "ema_decay": "Evaluate, keep and export an exponential moving average of the weights "
                 "with this decay (e.g. 0.999; 0: the trained weights themselves).",
    "distillation_weight": "Weight w of the teacher's tag distribution in the loss, (1 − w) "
                           "· CE(gold) + w · CE(teacher), per token; --train_data must then "
                           "hold teacher log-probabilities (python -m tetra_tf.distillation). "
                           "0: the gold tags alone.",
    "label_smoothing": "Label smoothing ε of the gold tags: their target is (1 − ε) · one-hot "
                       "+ ε · uniform over the head's tags (0: one-hot).",
    "pos_loss_weight": "Weight of the POS head's mean loss beside the leaf and internal tag "
                       "heads' (weight 1 each). 0 leaves the POS head untrained: the trees' "
                       "predicted POS are then meaningless.",
    "keep": "Which epoch's weights best/ keeps: the 'last' epoch (dev F1 only reported, "
            "so unbiased), or the 'best' dev F1. Without --dev_data, the last.",
    "max_stack_depth": "Depth cap d of the decoder, recorded with the model.",
    "checkpoint_every_steps": "Checkpoint every N steps (and at every epoch's end).",
    "seed": "Seed for shuffling and initialization.",
    "jit_compile": "Compile the train step with XLA (default: on with TPUs).",
    "mixed_precision": "Mixed precision policy (bfloat16 on TPUs).",
}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines the command line's flags; only when run as a program, so that importing
    this module (export, benchmarks) leaves the flag namespace free."""
    into = {"flag_values": flag_values}
    flags.DEFINE_string("train_data", None, "Training data: a tools/convert_ptb.py output "
                        "directory, or several joined by commas (same tag vocabulary), e.g. "
                        "train,dev for a final fit.", **into)
    flags.DEFINE_string("dev_data", None, "Dev data (same vocabulary), scored after every "
                        "epoch.", **into)
    flags.DEFINE_string("model_dir", None, "Where checkpoints, the best model and logs are written. "
                        "Rerunning with the same directory resumes training, with the "
                        "recipe it began with (--epochs and --keep may change).", **into)
    flags.DEFINE_string("encoder", None, "Pretrained encoder: all-MiniLM-L6-v2 (the default) "
                        "or all-mpnet-base-v2 by name (`python -m tetra_tf.default_encoder "
                        "[--encoder=NAME]` fetches them), a HuggingFace BERT or MPNet "
                        "directory (config.json, model.safetensors, vocab.txt) or a tf-models "
                        "BERT checkpoint directory.", **into)
    flags.DEFINE_string("tpu", None, "TPU name, or 'local': train with TPUStrategy.", **into)
    flags.DEFINE_enum("strategy", "default", ["default", "mirrored", "multi_worker"],
                      "Strategy when --tpu is not set (multi_worker reads TF_CONFIG).", **into)
    cli.define_dataclass_flags(TrainingConfig, _CONFIG_HELP,
                               enums={"mixed_precision": ["none", "bfloat16"],
                                      "keep": list(KEEP_CHOICES)},
                               skip=("jit_compile",), **into)
    flags.DEFINE_bool("jit_compile", None, _CONFIG_HELP["jit_compile"], **into)
    flags.DEFINE_integer("max_steps", None, "Stop at this global step (smoke runs).", **into)
    flags.DEFINE_bool("progress", True, "Show progress bars.", **into)
    flags.DEFINE_string("evaluate", None, "Instead of training, score --model_dir's best weights on "
                        "this converted data directory (EVALB, COLLINS.prm), print JSON and save "
                        "it in evaluations.json there (the export's model card shows it).",
                        **into)


def config_from_flags(flag_values: flags.FlagValues = flags.FLAGS) -> TrainingConfig:
    """The recipe that parsed flags give (--jit_compile defaults to on with --tpu)."""
    jit_compile = flag_values.jit_compile
    return cli.dataclass_from_flags(
        TrainingConfig, flag_values,
        jit_compile=bool(flag_values.tpu) if jit_compile is None else jit_compile)


def recipe_of_command_line(args: list[str]) -> TrainingConfig:
    """The recipe that `python -m tetra_tf.train ARGS` would train, defaults resolved, without
    training (so that a recipe's record survives a change of the defaults).

    Raises:
      cli.UsageError: ARGS are not flags of this program.
    """
    flag_values = flags.FlagValues()
    define_flags(flag_values)
    try:
        arguments = flag_values(["tetra_tf.train", *args])[1:]
    except flags.Error as error:
        raise cli.UsageError(f"{error} (flags of python -m tetra_tf.train)") from None
    if arguments:
        raise cli.UsageError(f"unexpected arguments {' '.join(arguments)} (python -m "
                         "tetra_tf.train takes flags only)")
    return config_from_flags(flag_values)


def main(argv) -> int:
    del argv
    if FLAGS.evaluate:
        if not FLAGS.model_dir:
            raise cli.UsageError("--evaluate needs --model_dir (see --help)")
        scores = evaluate_model(FLAGS.model_dir, FLAGS.evaluate)
        model_card.record_evaluation(FLAGS.model_dir, FLAGS.evaluate, scores)
        print(json.dumps(scores, indent=2))
        return 0
    cli.require("train_data", "model_dir")
    config = config_from_flags()
    tf_keras.utils.set_random_seed(config.seed)
    strategy = get_strategy(FLAGS.tpu, FLAGS.strategy)
    summary = train(FLAGS.train_data, FLAGS.dev_data, FLAGS.model_dir, config, strategy,
                    encoder_path=FLAGS.encoder, max_steps=FLAGS.max_steps,
                    progress=FLAGS.progress,
                    command=" ".join(["python -m tetra_tf.train"] + sys.argv[1:]))
    best = summary["best"]
    if best.get("epoch") is None:
        kept = "no epoch finished, no weights kept yet"
    elif config.keep == "best" and best.get("dev_f1") is not None:
        kept = f"best dev F1 {best['dev_f1']:.2f} (epoch {best['epoch']})"
    else:
        kept = f"kept epoch {best['epoch']}"
    print(f"trained to step {summary['steps']} in {summary['seconds']:.0f} s; {kept}")
    return 0



def run_program() -> None:
    """Runs `python -m tetra_tf.train` (tetra_tf/train.py)."""
    define_flags()
    cli.adopt_program_flags(__name__)
    cli.run(main, user_errors=(ValueError,), flag_names=FLAG_NAMES)
