"""A training model directory: what it holds, how to rebuild its tagger, which weights to use.

  tagger_config.json   the TaggerSpec: encoder and heads configuration, max_stack_depth
  vocab/               tag vocabularies and the encoder's wordpiece vocabulary
  ckpt/                rolling checkpoints (model, optimizers, step) for automatic resume
  best/model           the kept weights: the best dev F1's or the last epoch's, averaged
                       with --ema_decay (best/best.json says which epoch)
  history.json, logs/  per-epoch records and TensorBoard summaries
  training.json        each run's command, date, data and recipe (for the model card)
  evaluations.json     `train --evaluate` results, per data directory

Training writes it; export, evaluation, benchmarks and the tests read it through this module.
"""

from __future__ import annotations

import dataclasses
import json
import os

from tetra_tf import train_extra  # noqa: F401  (first: the [train] extra, Keras 2)

import tensorflow as tf
import tf_keras

from tetra_tf.contract import export_format
from tetra_tf.errors import ModelDirError
from tetra_tf.training import encoders
from tetra_tf.training.model import ENCODER_INPUTS, HeadsConfig, TetraTagger

CONFIG_FILE = "tagger_config.json"
VOCAB_DIR = "vocab"
# Its name is the export's vocabulary asset's: the SavedModel keeps the file name.
ENCODER_VOCAB_FILE = os.path.basename(export_format.ENCODER_VOCAB_ASSET)
BEST_DIR = "best"
BEST_CHECKPOINT = os.path.join(BEST_DIR, "model")
ROLLING_CHECKPOINT_DIR = "ckpt"
BEST_RECORD_FILE = "best.json"
HISTORY_FILE = "history.json"
TRAINING_FILE = "training.json"  # each training run's command, date, data and recipe
EVALUATIONS_FILE = "evaluations.json"  # `train --evaluate` results, per data directory


@dataclasses.dataclass
class TaggerSpec:
    """What a model directory records about the model: enough to rebuild it."""

    encoder: encoders.EncoderConfig
    heads: HeadsConfig
    max_stack_depth: int

    def save(self, model_dir: str) -> None:
        with open(os.path.join(model_dir, CONFIG_FILE), "w", encoding="utf-8") as f:
            json.dump({"encoder": self.encoder.to_dict(),
                       "heads": dataclasses.asdict(self.heads),
                       "max_stack_depth": self.max_stack_depth}, f, indent=2)

    @classmethod
    def load(cls, model_dir: str) -> "TaggerSpec":
        path = os.path.join(model_dir, CONFIG_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} not found: not a tetra-tf model directory")
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        return cls(encoders.EncoderConfig.from_dict(spec["encoder"]), HeadsConfig(**spec["heads"]),
                   int(spec["max_stack_depth"]))


def read_json(path: str):
    """A model directory's JSON file, or None if it does not exist."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_json(path: str, value) -> None:
    """Writes a JSON file atomically (a reader never sees half of it)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def vocab_dir(model_dir: str) -> str:
    """The directory of the tag vocabularies."""
    return os.path.join(model_dir, VOCAB_DIR)


def encoder_vocab_path(model_dir: str) -> str:
    """The encoder's wordpiece vocabulary, copied there when training started."""
    return os.path.join(model_dir, VOCAB_DIR, ENCODER_VOCAB_FILE)


def dummy_inputs(batch_size: int = 1, length: int = 8, words: int = 2) -> dict:
    """Zero inputs of the tagger's signature, to create its variables."""
    inputs = {key: tf.zeros([batch_size, 1, length], tf.int32) for key in ENCODER_INPUTS}
    inputs["word_end_positions"] = tf.zeros([batch_size, words], tf.int32)
    return inputs


def build_tagger(spec: TaggerSpec, encoder: tf_keras.Model | None = None) -> TetraTagger:
    """Builds the tagger (randomly initialized unless an encoder is given) and its variables."""
    if encoder is None:
        encoder = encoders.encoder_from_config(spec.encoder)
    model = TetraTagger(encoder, spec.heads)
    model(dummy_inputs(), training=False)
    return model


def resolve_checkpoint(path: str) -> tuple[str, str]:
    """Finds the model directory and the checkpoint to use.

    Args:
      path: a training model directory (best/model is used when present, else the latest
        checkpoint in ckpt/), or a checkpoint prefix inside one (e.g. MODEL/ckpt/ckpt-400).

    Returns:
      (model directory, checkpoint prefix).

    Raises:
      ModelDirError: when `path` is neither, or the model directory has no checkpoint.
    """
    path = os.path.normpath(path)
    if os.path.isdir(path):
        if not os.path.isfile(os.path.join(path, CONFIG_FILE)):
            raise ModelDirError(f"{path} is not a tetra-tf model directory (no {CONFIG_FILE})")
        best = os.path.join(path, BEST_CHECKPOINT)
        if os.path.isfile(best + ".index"):
            return path, best
        latest = tf.train.latest_checkpoint(os.path.join(path, ROLLING_CHECKPOINT_DIR))
        if latest:
            return path, latest
        raise ModelDirError(f"{path} holds no checkpoint ({BEST_CHECKPOINT} or "
                            f"{ROLLING_CHECKPOINT_DIR}/): train the model first")
    if os.path.isfile(path + ".index"):
        directory = os.path.dirname(os.path.abspath(path))
        for candidate in (directory, os.path.dirname(directory)):
            if os.path.isfile(os.path.join(candidate, CONFIG_FILE)):
                return candidate, path
        raise ModelDirError(f"checkpoint {path} is not inside a tetra-tf model directory "
                            f"(no {CONFIG_FILE} next to it or one level up)")
    raise ModelDirError(f"{path}: no such model directory or checkpoint")


def load_tagger(model_dir: str, checkpoint: str) -> tuple[TetraTagger, TaggerSpec]:
    """Rebuilds the tagger of a model directory and restores its weights.

    Raises:
      ModelDirError: when the checkpoint does not hold this directory's model.
    """
    spec = TaggerSpec.load(model_dir)
    tagger = build_tagger(spec)
    try:
        status = tf.train.Checkpoint(model=tagger).read(checkpoint)
        status.expect_partial()  # rolling checkpoints also hold optimizers
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise ModelDirError(f"{checkpoint}: does not restore the model of {model_dir} "
                            f"({str(e).splitlines()[0][:300]})") from None
    return tagger, spec
