"""Transformer encoders (BERT, MPNet): configuration, construction and pretrained weights.

A BERT encoder is tf-models' `BertEncoderV2`, an MPNet encoder `mpnet_encoder.MPNetEncoder`
(both `tf_keras` layers of the same interface). Weights can come from

* a HuggingFace BERT or MPNet directory: ``config.json`` (its ``model_type`` says which) +
  ``model.safetensors`` (or ``pytorch_model.bin`` when torch is installed) + ``vocab.txt``,
  with the special tokens from ``special_tokens_map.json`` or ``tokenizer_config.json``;
  weight names with or without the ``bert.``/``mpnet.`` prefix; pre-training heads are
  ignored;
* a tf-models / Google BERT TF2 directory: ``bert_config.json`` (or tf-models ``params.yaml``,
  or our ``encoder_config.json``) + an object-based checkpoint written with
  ``tf.train.Checkpoint(encoder=...)`` or ``(model=...)`` from `BertEncoder` (the functional
  v1 layout, as in the official TF2 BERT checkpoints and tf-models' converter) or
  `BertEncoderV2` + ``vocab.txt``;
* a TF1 Google BERT checkpoint (``bert/encoder/layer_0/...`` names) with ``bert_config.json``.

Activations: HuggingFace ``"gelu"`` is the exact erf GELU. Google's BERT code (and tf-models'
``"gelu"``) computes the tanh approximation, so Google/tf-models configs map to
``"gelu_approximate"``; HF ``"gelu_new"``/``"gelu_pytorch_tanh"`` do as well.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Mapping

from tetra_tf import train_extra  # noqa: F401  (first: the [train] extra, Keras 2)

import numpy as np
import tensorflow as tf
import tf_keras
from official.modeling.activations import gelu as _approximate_gelu
from official.nlp.modeling import networks

from tetra_tf import default_encoder
from tetra_tf.contract import export_format
from tetra_tf.contract.export_format import SpecialTokens
from tetra_tf.data.tokenization import SubwordTokenizer
from tetra_tf.training.mpnet_encoder import MPNetEncoder


ACTIVATIONS = ("gelu", "gelu_approximate", "relu")
MODEL_TYPES = ("bert", "mpnet")
VOCAB_FILE = "vocab.txt"
ENCODER_CONFIG_FILE = "encoder_config.json"
HF_CONFIG_FILE = "config.json"
BERT_CONFIG_FILE = "bert_config.json"
TF_MODELS_PARAMS_FILE = "params.yaml"
SAFETENSORS_FILE = "model.safetensors"
PYTORCH_FILE = "pytorch_model.bin"
HF_TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
HF_SPECIAL_TOKENS_FILE = "special_tokens_map.json"

# tf-models' BertEncoderV2 hard-codes this epsilon for the embedding layer norm, and its
# transformer blocks default to it.
_KERAS_NORM_EPSILON = 1e-12

_HF_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "gelu_fast": "gelu_approximate",
    "relu": "relu",
}
# Google BERT's `gelu` is the tanh approximation (google-research/bert modeling.py), and
# tf-models' `tf_utils.get_activation("gelu")` is too.
_GOOGLE_ACTIVATIONS = {"gelu": "gelu_approximate", "relu": "relu"}


@dataclasses.dataclass
class EncoderConfig:
    """Architecture of a BERT or MPNet encoder, plus its vocabulary's casing and specials.

    Attributes:
      vocab_size: rows of the word embedding table.
      hidden_size: width of the hidden states.
      num_layers: number of transformer blocks.
      num_attention_heads: attention heads per block (divides hidden_size).
      intermediate_size: width of the feed-forward inner layer.
      max_sequence_length: number of position embeddings (longest input in pieces).
      type_vocab_size: number of segment (token type) embeddings (0: none, as in MPNet).
      hidden_dropout_rate: dropout after embeddings, attention output and feed-forward.
      attention_dropout_rate: dropout on attention probabilities.
      norm_epsilon: layer normalization epsilon.
      initializer_range: stddev of the truncated normal initializer.
      activation: "gelu" (exact erf GELU, HF BERT), "gelu_approximate" (tanh GELU, Google
        BERT and tf-models) or "relu".
      do_lower_case: whether the vocabulary is uncased (lowercase + strip accents).
      model_type: "bert" or "mpnet" (relative position bias, no segments).
      relative_attention_num_buckets: buckets of MPNet's relative position bias (0: none).
      relative_attention_max_distance: distance from which relative positions share a
        bucket.
      cls_token, sep_token, pad_token, unk_token: the vocabulary's special tokens.
    """

    vocab_size: int
    hidden_size: int = 768
    num_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_sequence_length: int = 512
    type_vocab_size: int = 2
    hidden_dropout_rate: float = 0.1
    attention_dropout_rate: float = 0.1
    norm_epsilon: float = 1e-12
    initializer_range: float = 0.02
    activation: str = "gelu"
    do_lower_case: bool = True
    model_type: str = "bert"
    relative_attention_num_buckets: int = 0
    relative_attention_max_distance: int = 128
    cls_token: str = SpecialTokens.cls
    sep_token: str = SpecialTokens.sep
    pad_token: str = SpecialTokens.pad
    unk_token: str = SpecialTokens.unk

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"unsupported encoder activation {self.activation!r}; "
                f"expected one of {', '.join(ACTIVATIONS)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}")
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"unsupported encoder model_type {self.model_type!r}; "
                             f"expected one of {', '.join(MODEL_TYPES)}")
        buckets = self.relative_attention_num_buckets
        if self.model_type == "mpnet":
            if self.type_vocab_size:
                raise ValueError(f"type_vocab_size {self.type_vocab_size}: an MPNet encoder "
                                 "has no segment embeddings (0)")
            # Half the buckets per direction, a quarter of them exact: at least 4, even.
            if buckets < 4 or buckets % 2:
                raise ValueError(f"relative_attention_num_buckets {buckets}: an MPNet "
                                 "encoder's relative position bias needs an even number >= 4")
        else:
            if self.type_vocab_size < 1:
                raise ValueError(f"type_vocab_size {self.type_vocab_size}: a BERT encoder "
                                 "has segment embeddings (>= 1)")
            if buckets:
                raise ValueError(f"relative_attention_num_buckets {buckets}: a BERT encoder "
                                 "has no relative position bias (0)")

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def special_tokens(self) -> SpecialTokens:
        return SpecialTokens(self.cls_token, self.sep_token, self.pad_token, self.unk_token)

    def tokenizer(self, vocab_path: str) -> SubwordTokenizer:
        """The in-graph tokenizer of this encoder's vocabulary file: its casing, its
        special tokens."""
        return SubwordTokenizer(vocab_path, lower_case=self.do_lower_case,
                                special_tokens=self.special_tokens)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "EncoderConfig":
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"unknown encoder config keys: {', '.join(unknown)}")
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "EncoderConfig":
        return cls.from_dict(json.loads(text))

    def save(self, path: str) -> None:
        """Writes the config as JSON (e.g. ``<dir>/encoder_config.json``)."""
        with tf.io.gfile.GFile(path, "w") as f:
            f.write(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str) -> "EncoderConfig":
        with tf.io.gfile.GFile(path, "r") as f:
            return cls.from_json(f.read())

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], do_lower_case: bool | None = None,
                       special_tokens: SpecialTokens | None = None) -> "EncoderConfig":
        """From a HuggingFace BERT or MPNet ``config.json`` dict.

        Args:
          config: the dict.
          do_lower_case: the tokenizer's casing (None: uncased).
          special_tokens: the tokenizer's specials; None: BERT's, which an MPNet config
            refuses (its vocabulary holds BERT's too, but it never saw them as specials).
        """
        model_type = config.get("model_type", "bert")
        if model_type not in MODEL_TYPES:
            raise ValueError(f"unsupported HuggingFace model_type {model_type!r}; "
                             f"supported: {', '.join(MODEL_TYPES)}")
        position_type = config.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ValueError(f"unsupported position_embedding_type {position_type!r}")
        if model_type == "bert":
            return cls._from_keys(config, _HF_KEYS, _HF_ACTIVATIONS, do_lower_case,
                                  special_tokens or SpecialTokens())
        if special_tokens is None:
            raise ValueError(f"an MPNet encoder needs its special tokens from "
                             f"{HF_SPECIAL_TOKENS_FILE} or {HF_TOKENIZER_CONFIG_FILE}")
        positions = int(config.get("max_position_embeddings", 512)) - mpnet_padding_rows(config)
        if positions < 4:
            raise ValueError(f"max_position_embeddings {config.get('max_position_embeddings')}"
                             f" leaves {positions} positions after padding_idx")
        # HF's MPNetModel sizes the bias table by the config but buckets with 32 and a
        # distance of 128, whatever the config says: other tables would not be read as HF's.
        buckets = int(config.get("relative_attention_num_buckets", HF_MPNET_BUCKETS))
        if buckets != HF_MPNET_BUCKETS:
            raise ValueError(f"relative_attention_num_buckets {buckets}: HuggingFace's MPNet "
                             f"buckets relative positions into {HF_MPNET_BUCKETS}")
        return dataclasses.replace(
            cls._from_keys(config, _HF_MPNET_KEYS, _HF_ACTIVATIONS, do_lower_case,
                           special_tokens, model_type="mpnet", type_vocab_size=0,
                           relative_attention_num_buckets=HF_MPNET_BUCKETS,
                           relative_attention_max_distance=HF_MPNET_MAX_DISTANCE),
            max_sequence_length=positions)

    @classmethod
    def from_bert_config(cls, config: Mapping[str, Any],
                         do_lower_case: bool | None = None) -> "EncoderConfig":
        """From a Google ``bert_config.json`` dict."""
        _check_unfactorized(config)
        return cls._from_keys(config, _GOOGLE_KEYS, _GOOGLE_ACTIVATIONS, do_lower_case,
                              SpecialTokens())

    @classmethod
    def from_tf_models_config(cls, config: Mapping[str, Any],
                              do_lower_case: bool | None = None) -> "EncoderConfig":
        """From tf-models' ``task.model.encoder.bert`` params (BertEncoderConfig)."""
        _check_unfactorized(config)
        if config.get("norm_first"):
            raise ValueError("pre-norm (norm_first) BERT encoders are not supported")
        return cls._from_keys(config, _TF_MODELS_KEYS, _GOOGLE_ACTIVATIONS, do_lower_case,
                              SpecialTokens())

    @classmethod
    def _from_keys(cls, config: Mapping[str, Any], keys: Mapping[str, tuple[str | None, Any]],
                   activations: Mapping[str, str], do_lower_case: bool | None,
                   special_tokens: SpecialTokens, **fixed: Any) -> "EncoderConfig":
        """Reads each field from its key in `config` (`keys`: field → (key, default));
        `fixed` gives fields the format does not configure."""
        types = {"int": int, "float": float, "str": str}
        values = dict(fixed, cls_token=special_tokens.cls, sep_token=special_tokens.sep,
                      pad_token=special_tokens.pad, unk_token=special_tokens.unk)
        for field in dataclasses.fields(cls):
            if field.name not in keys:
                continue
            key, default = keys[field.name]
            if key is not None and key in config:
                values[field.name] = types[field.type](config[key])
            elif default is not None:
                values[field.name] = default
            else:
                raise ValueError(f"encoder config lacks {key!r}")
        values["activation"] = _map_activation(values["activation"], activations)
        values["do_lower_case"] = True if do_lower_case is None else bool(do_lower_case)
        return cls(**values)


# Per source format: field → (the format's key, default when the key is absent; None: the
# key is required). A None key means the format has no such setting: the default holds.
_HF_KEYS = {
    "vocab_size": ("vocab_size", None),
    "hidden_size": ("hidden_size", None),
    "num_layers": ("num_hidden_layers", None),
    "num_attention_heads": ("num_attention_heads", None),
    "intermediate_size": ("intermediate_size", None),
    "max_sequence_length": ("max_position_embeddings", 512),
    "type_vocab_size": ("type_vocab_size", 2),
    "hidden_dropout_rate": ("hidden_dropout_prob", 0.1),
    "attention_dropout_rate": ("attention_probs_dropout_prob", 0.1),
    "norm_epsilon": ("layer_norm_eps", 1e-12),
    "initializer_range": ("initializer_range", 0.02),
    "activation": ("hidden_act", "gelu"),
}
_GOOGLE_KEYS = {**_HF_KEYS, "norm_epsilon": (None, 1e-12)}
# HF's MPNetConfig defaults; positions and the bias are read apart.
_HF_MPNET_KEYS = {name: key for name, key in _HF_KEYS.items()
                  if name not in ("max_sequence_length", "type_vocab_size")}
HF_MPNET_BUCKETS = 32
HF_MPNET_MAX_DISTANCE = 128


def mpnet_padding_rows(config: Mapping[str, Any]) -> int:
    """Rows of a HF MPNet position table before its first piece's: fairseq's positions
    count from padding_idx + 1."""
    return int(config.get("pad_token_id", 1)) + 1
_TF_MODELS_KEYS = {
    "vocab_size": ("vocab_size", None),
    "hidden_size": ("hidden_size", 768),
    "num_layers": ("num_layers", 12),
    "num_attention_heads": ("num_attention_heads", 12),
    "intermediate_size": ("intermediate_size", 3072),
    "max_sequence_length": ("max_position_embeddings", 512),
    "type_vocab_size": ("type_vocab_size", 2),
    "hidden_dropout_rate": ("dropout_rate", 0.1),
    "attention_dropout_rate": ("attention_dropout_rate", 0.1),
    "norm_epsilon": ("norm_epsilon", 1e-12),
    "initializer_range": ("initializer_range", 0.02),
    "activation": ("hidden_activation", "gelu"),
}


def _check_unfactorized(config: Mapping[str, Any]) -> None:
    embedding_size = config.get("embedding_size")
    if embedding_size not in (None, config["hidden_size"]):
        raise ValueError(f"factorized embeddings (embedding_size {embedding_size} != "
                         f"hidden_size {config['hidden_size']}) are not supported")


def _map_activation(name: str, table: Mapping[str, str]) -> str:
    if name not in table:
        raise ValueError(f"unsupported encoder activation {name!r}; "
                         f"supported: {', '.join(sorted(table))}")
    return table[name]


def _keras_activation(name: str):
    # Named, registered functions (no lambdas) keep the encoder's get_config serializable.
    if name == "gelu":
        return "gelu"  # tf_keras.activations.gelu, approximate=False
    if name == "gelu_approximate":
        return _approximate_gelu  # registered as "Text>gelu"
    return name


def build_encoder(config: EncoderConfig) -> networks.BertEncoderV2 | MPNetEncoder:
    """Returns a freshly initialized encoder for `config` (`BertEncoderV2` or
    `MPNetEncoder`), with its variables built.

    The encoder takes ``dict(input_word_ids, input_mask, input_type_ids)`` int32 [batch, length]
    and returns a dict with ``sequence_output`` [batch, length, hidden_size].
    """
    shared = dict(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_layers=config.num_layers,
        num_attention_heads=config.num_attention_heads,
        max_sequence_length=config.max_sequence_length,
        inner_dim=config.intermediate_size,
        inner_activation=_keras_activation(config.activation),
        output_dropout=config.hidden_dropout_rate,
        attention_dropout=config.attention_dropout_rate,
        initializer=tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range),
    )
    if config.model_type == "mpnet":
        encoder = MPNetEncoder(
            **shared, norm_epsilon=config.norm_epsilon,
            relative_attention_num_buckets=config.relative_attention_num_buckets,
            relative_attention_max_distance=config.relative_attention_max_distance)
    else:
        encoder = networks.BertEncoderV2(**shared, type_vocab_size=config.type_vocab_size)
        _set_norm_epsilon(encoder, config.norm_epsilon)
    _build(encoder)
    return encoder


def encoder_from_config(config: EncoderConfig | Mapping[str, Any] | str
                        ) -> networks.BertEncoderV2 | MPNetEncoder:
    """Rebuilds the encoder architecture (weights then come from a checkpoint).

    Args:
      config: an `EncoderConfig`, its dict, its JSON text, or a path to its JSON file.
    """
    if isinstance(config, str):
        config = (EncoderConfig.from_json(config) if config.lstrip().startswith("{")
                  else EncoderConfig.load(config))
    elif not isinstance(config, EncoderConfig):
        config = EncoderConfig.from_dict(config)
    return build_encoder(config)


def _set_norm_epsilon(encoder, epsilon: float) -> None:
    if epsilon == _KERAS_NORM_EPSILON:
        return
    # BertEncoderV2 does not expose the epsilon; its layer norms are built lazily, so setting
    # it before the first call takes effect.
    encoder._embedding_norm_layer.epsilon = epsilon  # pylint: disable=protected-access
    for block in encoder.transformer_layers:
        block._norm_epsilon = epsilon  # pylint: disable=protected-access


def _build(encoder) -> None:
    ids = tf.zeros([1, 2], tf.int32)
    encoder(dict(input_word_ids=ids, input_mask=tf.ones_like(ids), input_type_ids=ids))


# ----------------------------------------------------------------------------------------
# Default encoder


def default_encoder_dir() -> str:
    """Directory of all-MiniLM-L6-v2's HF files (config.json, safetensors, vocab).

    Raises FileNotFoundError naming the fix (`python -m tetra_tf.default_encoder`) when they
    have not been fetched; see `tetra_tf.default_encoder`.
    """
    return default_encoder.encoder_dir()


def __getattr__(name):
    if name == "DEFAULT_ENCODER_DIR":
        return default_encoder_dir()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ----------------------------------------------------------------------------------------
# Pretrained weights


@dataclasses.dataclass
class PretrainedEncoder:
    """An encoder with imported weights, its config and its WordPiece vocabulary."""

    encoder: networks.BertEncoderV2 | MPNetEncoder
    config: EncoderConfig
    vocab_path: str
    source: str  # "hf-safetensors", "hf-pytorch", "tf2-checkpoint" or "tf1-checkpoint"


def load_pretrained_encoder(path: str | None = None,
                            encoder: networks.BertEncoderV2 | MPNetEncoder | None = None
                            ) -> PretrainedEncoder:
    """Builds a `BertEncoderV2` or `MPNetEncoder` and loads pretrained weights into it.

    Args:
      path: an encoder directory (HuggingFace BERT or MPNet, tf-models/Google TF2 or TF1
        checkpoint; see the module docstring), a TF checkpoint prefix inside such a
        directory, or the name of an encoder `tetra_tf.default_encoder` fetches (e.g.
        all-mpnet-base-v2). None: the default all-MiniLM-L6-v2.
      encoder: an already built encoder to load into (e.g. one created inside a distribution
        strategy scope); its architecture must match the directory's config.

    Raises:
      FileNotFoundError: a required file is missing (the message names it).
      ValueError: the config is unsupported, or a weight does not fit the config.
    """
    path = default_encoder_dir() if path is None else default_encoder.resolve(os.fspath(path))
    directory, checkpoint_prefix = _split_checkpoint_path(path)
    vocab_path = os.path.join(directory, VOCAB_FILE)
    config = _read_config(directory)
    if checkpoint_prefix is None:
        source, weights_path = _find_weights(directory)
    else:
        source, weights_path = "tf-checkpoint", checkpoint_prefix
    if not tf.io.gfile.exists(vocab_path):
        raise FileNotFoundError(f"{directory}: missing {VOCAB_FILE} (the encoder's vocabulary)")
    num_vocab_lines = _count_lines(vocab_path)
    if num_vocab_lines > config.vocab_size:
        raise ValueError(f"{vocab_path} has {num_vocab_lines} entries but the encoder has "
                         f"only {config.vocab_size} word embeddings")
    if encoder is None:
        encoder = build_encoder(config)
    elif not encoder.built:
        _build(encoder)

    if source in ("hf-safetensors", "hf-pytorch"):
        if source == "hf-safetensors":
            from safetensors.numpy import load_file  # pylint: disable=import-outside-toplevel
            weights = _strip_hf_names(load_file(weights_path))
        else:
            weights = _strip_hf_names(_load_torch(weights_path))
        if config.model_type == "mpnet":
            padding_rows = mpnet_padding_rows(_read_json(os.path.join(directory,
                                                                      HF_CONFIG_FILE)))
            weights = _mpnet_to_bert_names(weights, config, padding_rows, weights_path)
        _assign_bert_weights(encoder, config, weights, weights_path)
    elif config.model_type != "bert":
        raise ValueError(f"{weights_path}: {config.model_type} weights load from HuggingFace "
                         f"files ({SAFETENSORS_FILE}) only")
    else:
        source = _restore_tf_checkpoint(encoder, config, weights_path)
    return PretrainedEncoder(encoder=encoder, config=config, vocab_path=vocab_path,
                             source=source)


def _split_checkpoint_path(path: str) -> tuple[str, str | None]:
    if tf.io.gfile.isdir(path):
        return path, None
    if tf.io.gfile.exists(path + ".index"):
        return os.path.dirname(path) or ".", path
    raise FileNotFoundError(f"encoder directory not found: {path}")


def _read_json(path: str) -> dict[str, Any]:
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: invalid JSON ({e})") from e


def _count_lines(path: str) -> int:
    with tf.io.gfile.GFile(path, "r") as f:
        return sum(1 for _ in f)


def _vocab_is_uncased(vocab_path: str) -> bool:
    """Guesses the casing from the vocabulary (`export_format.vocabulary_is_uncased`)."""
    with tf.io.gfile.GFile(vocab_path, "r") as f:
        return export_format.vocabulary_is_uncased([line.rstrip("\n") for line in f])


def _read_config(directory: str) -> EncoderConfig:
    def exists(name):
        return tf.io.gfile.exists(os.path.join(directory, name))

    vocab_path = os.path.join(directory, VOCAB_FILE)

    def casing(default_from_tokenizer=None):
        if default_from_tokenizer is not None:
            return bool(default_from_tokenizer)
        return _vocab_is_uncased(vocab_path) if tf.io.gfile.exists(vocab_path) else True

    if exists(ENCODER_CONFIG_FILE):
        return EncoderConfig.load(os.path.join(directory, ENCODER_CONFIG_FILE))
    if exists(HF_CONFIG_FILE):
        tokenizer_config = (_read_json(os.path.join(directory, HF_TOKENIZER_CONFIG_FILE))
                            if exists(HF_TOKENIZER_CONFIG_FILE) else None)
        special_tokens_map = (_read_json(os.path.join(directory, HF_SPECIAL_TOKENS_FILE))
                              if exists(HF_SPECIAL_TOKENS_FILE) else None)
        hf_config = _read_json(os.path.join(directory, HF_CONFIG_FILE))
        return EncoderConfig.from_hf_config(
            hf_config, casing((tokenizer_config or {}).get("do_lower_case")),
            _hf_special_tokens(directory, special_tokens_map, tokenizer_config,
                               every_one=hf_config.get("model_type", "bert") != "bert"))
    if exists(BERT_CONFIG_FILE):
        return EncoderConfig.from_bert_config(
            _read_json(os.path.join(directory, BERT_CONFIG_FILE)), casing())
    if exists(TF_MODELS_PARAMS_FILE):
        import yaml  # pylint: disable=import-outside-toplevel
        with tf.io.gfile.GFile(os.path.join(directory, TF_MODELS_PARAMS_FILE), "r") as f:
            params = yaml.safe_load(f) or {}
        encoder_params = params.get("task", {}).get("model", {}).get("encoder", {})
        if encoder_params.get("type", "bert") != "bert" or "bert" not in encoder_params:
            raise ValueError(f"{directory}/{TF_MODELS_PARAMS_FILE}: no BERT encoder config "
                             "under task.model.encoder.bert")
        return EncoderConfig.from_tf_models_config(encoder_params["bert"], casing())
    raise FileNotFoundError(
        f"{directory}: missing encoder config ({HF_CONFIG_FILE}, {BERT_CONFIG_FILE}, "
        f"{ENCODER_CONFIG_FILE} or {TF_MODELS_PARAMS_FILE})")


_SPECIAL_TOKEN_KEYS = {"cls": "cls_token", "sep": "sep_token", "pad": "pad_token",
                       "unk": "unk_token"}


def _hf_special_tokens(directory: str, special_tokens_map: Mapping[str, Any] | None,
                       tokenizer_config: Mapping[str, Any] | None,
                       every_one: bool) -> SpecialTokens | None:
    """The special tokens a HF tokenizer names.

    Args:
      directory: the checkpoint's directory, for messages.
      special_tokens_map, tokenizer_config: its files' contents (None: no such file); the
        first names a token before the second. Each entry is a string or an AddedToken
        dict ({"content": ...}).
      every_one: each token must be named (for a vocabulary that is not BERT's); else one
        named by neither file keeps BERT's.

    Returns:
      The tokens, or None when neither file names any.

    Raises:
      ValueError: an entry is not a token, or `every_one` and one is not named.
    """
    found = {}
    for name, key in _SPECIAL_TOKEN_KEYS.items():
        for source in (special_tokens_map, tokenizer_config):
            value = (source or {}).get(key)
            if isinstance(value, dict):
                value = value.get("content")
            if value is not None:
                if not isinstance(value, str) or not value:
                    raise ValueError(f"{directory}: {key} {value!r} is not a token")
                found[name] = value
                break
    if not found:
        return None
    missing = [key for name, key in _SPECIAL_TOKEN_KEYS.items() if name not in found]
    if every_one and missing:
        raise ValueError(f"{directory}: neither {HF_SPECIAL_TOKENS_FILE} nor "
                         f"{HF_TOKENIZER_CONFIG_FILE} names the {', '.join(missing)}")
    return SpecialTokens(**found)


def _find_weights(directory: str) -> tuple[str, str]:
    safetensors_path = os.path.join(directory, SAFETENSORS_FILE)
    if tf.io.gfile.exists(safetensors_path):
        return "hf-safetensors", safetensors_path
    latest = tf.train.latest_checkpoint(directory)
    if latest:
        return "tf-checkpoint", latest
    indexes = sorted(tf.io.gfile.glob(os.path.join(directory, "*.index")))
    if len(indexes) == 1:
        return "tf-checkpoint", indexes[0][:-len(".index")]
    if len(indexes) > 1:
        names = ", ".join(os.path.basename(p)[:-len(".index")] for p in indexes)
        raise ValueError(f"{directory}: several checkpoints ({names}); "
                         "pass the checkpoint prefix instead of the directory")
    pytorch_path = os.path.join(directory, PYTORCH_FILE)
    if tf.io.gfile.exists(pytorch_path):
        return "hf-pytorch", pytorch_path
    if tf.io.gfile.exists(os.path.join(directory, HF_CONFIG_FILE)):
        raise FileNotFoundError(f"{directory}: missing {SAFETENSORS_FILE} (encoder weights)")
    raise FileNotFoundError(
        f"{directory}: missing encoder weights (a TF checkpoint *.index/*.data-* "
        f"or {SAFETENSORS_FILE})")


def _load_torch(path: str) -> dict[str, np.ndarray]:
    try:
        import torch  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise ValueError(f"{path}: reading pytorch_model.bin needs torch; convert the "
                         f"weights to {SAFETENSORS_FILE} instead") from e
    state = torch.load(path, map_location="cpu", weights_only=True)
    return {name: tensor.float().numpy() for name, tensor in state.items()}


def _strip_hf_names(weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF names without the model prefix (``bert.``, ``mpnet.``) and with LayerNorm
    gamma/beta renamed."""
    stripped = {}
    for name, value in weights.items():
        for prefix in ("bert.", "mpnet."):
            if name.startswith(prefix):
                name = name[len(prefix):]
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight")
        name = name.replace("LayerNorm.beta", "LayerNorm.bias")
        stripped[name] = value
    return stripped


# HF MPNet's block weights under the names of HF BERT's, which `_assign_bert_weights` reads.
_MPNET_TO_BERT_NAMES = (
    (".attention.attn.q.", ".attention.self.query."),
    (".attention.attn.k.", ".attention.self.key."),
    (".attention.attn.v.", ".attention.self.value."),
    (".attention.attn.o.", ".attention.output.dense."),
    (".attention.LayerNorm.", ".attention.output.LayerNorm."),
)
_POSITION_TABLE = "embeddings.position_embeddings.weight"


def _mpnet_to_bert_names(weights: Mapping[str, np.ndarray], config: EncoderConfig,
                         padding_rows: int, source: str) -> dict[str, np.ndarray]:
    """HF MPNet weights under HF BERT's names.

    Args:
      weights: HF MPNet weights, model prefix stripped (`_strip_hf_names`).
      config: the encoder's config.
      padding_rows: the position table's rows before the first piece's
        (`mpnet_padding_rows`), dropped so that row 0 serves the first piece, as in BERT.
      source: the weights' file, for messages.

    Returns:
      The renamed weights.

    Raises:
      ValueError: the position table's rows are not padding_rows + max_sequence_length.
    """
    renamed = {}
    for name, value in weights.items():
        for old, new in _MPNET_TO_BERT_NAMES:
            name = name.replace(old, new)
        renamed[name] = value
    table = renamed.get(_POSITION_TABLE)
    if table is not None:
        if table.shape[0] != padding_rows + config.max_sequence_length:
            raise ValueError(f"{source}: {_POSITION_TABLE} has {table.shape[0]} rows; the "
                             f"config says {padding_rows} padding rows and "
                             f"{config.max_sequence_length} positions")
        renamed[_POSITION_TABLE] = table[padding_rows:]
    return renamed


def _tf1_to_hf_names(reader) -> dict[str, np.ndarray]:
    """Google TF1 BERT variables → HF names and layouts (kernels transposed to [out, in])."""
    weights = {}
    for key in reader.get_variable_to_shape_map():
        if not key.startswith("bert/") or "adam" in key.lower():
            continue
        name = key[len("bert/"):]
        name = re.sub(r"layer_(\d+)", r"layer.\1", name).replace("/", ".")
        value = reader.get_tensor(key)
        if name.endswith(".kernel"):
            name, value = name[:-len(".kernel")] + ".weight", value.T
        elif name.endswith(".gamma"):
            name = name[:-len(".gamma")] + ".weight"
        elif name.endswith(".beta"):
            name = name[:-len(".beta")] + ".bias"
        elif name.endswith("_embeddings"):
            name += ".weight"
        weights[name] = value
    return weights


def _assign_bert_weights(encoder, config: EncoderConfig, weights: Mapping[str, np.ndarray],
                         source: str) -> None:
    """Copies HF-named, HF-layout BERT weights into a built BertEncoderV2 (or MPNet's,
    renamed by `_mpnet_to_bert_names`, into an MPNetEncoder)."""
    hidden, heads, head_size = config.hidden_size, config.num_attention_heads, config.head_size
    # pylint: disable=protected-access
    assignments: list[tuple[tf.Variable, str, Any]] = []

    def add(variable, name, transform=None):
        assignments.append((variable, name, transform))

    def layer_norm(layer, prefix):
        add(layer.gamma, prefix + ".weight")
        add(layer.beta, prefix + ".bias")

    def dense(layer, prefix, kernel_shape, bias_shape):
        add(layer.kernel, prefix + ".weight", lambda w: w.T.reshape(kernel_shape))
        add(layer.bias, prefix + ".bias", lambda b: b.reshape(bias_shape))

    add(encoder._embedding_layer.embeddings, "embeddings.word_embeddings.weight")
    add(encoder._position_embedding_layer._position_embeddings, _POSITION_TABLE)
    if encoder._type_embedding_layer is not None:
        add(encoder._type_embedding_layer.embeddings, "embeddings.token_type_embeddings.weight")
    layer_norm(encoder._embedding_norm_layer, "embeddings.LayerNorm")
    if config.relative_attention_num_buckets:
        add(encoder._relative_position_bias._relative_attention_bias,
            "encoder.relative_attention_bias.weight")
    for i, block in enumerate(encoder.transformer_layers):
        prefix = f"encoder.layer.{i}"
        attention = block._attention_layer
        for part, layer in (("query", attention._query_dense), ("key", attention._key_dense),
                            ("value", attention._value_dense)):
            dense(layer, f"{prefix}.attention.self.{part}", (hidden, heads, head_size),
                  (heads, head_size))
        dense(attention._output_dense, f"{prefix}.attention.output.dense",
              (heads, head_size, hidden), (hidden,))
        layer_norm(block._attention_layer_norm, f"{prefix}.attention.output.LayerNorm")
        dense(block._intermediate_dense, f"{prefix}.intermediate.dense",
              (hidden, config.intermediate_size), (config.intermediate_size,))
        dense(block._output_dense, f"{prefix}.output.dense",
              (config.intermediate_size, hidden), (hidden,))
        layer_norm(block._output_layer_norm, f"{prefix}.output.LayerNorm")
    if "pooler.dense.weight" in weights and getattr(encoder, "_pooler_layer", None):
        dense(encoder._pooler_layer, "pooler.dense", (hidden, hidden), (hidden,))
    # pylint: enable=protected-access

    layers_in_file = {int(m.group(1)) for name in weights
                      if (m := re.match(r"encoder\.layer\.(\d+)\.", name))}
    if layers_in_file != set(range(config.num_layers)):
        raise ValueError(f"{source}: has {len(layers_in_file)} transformer layers but the "
                         f"config says {config.num_layers}")
    values = []
    for variable, name, transform in assignments:
        if name not in weights:
            raise ValueError(f"{source}: missing weight {name}")
        value = np.asarray(weights[name], dtype=np.float32)
        expected = tuple(variable.shape)
        try:
            value = transform(value) if transform else value
        except ValueError:
            value = None
        if value is None or value.shape != expected:
            raise ValueError(f"{source}: weight {name} has shape "
                             f"{tuple(np.shape(weights[name]))}, which does not fit the "
                             f"encoder variable {variable.name} {expected}")
        values.append(value)
    for (variable, _, _), value in zip(assignments, values):
        variable.assign(value)


_VARIABLE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_QUERY_KERNEL_RE = re.compile(
    r"^(.*?)/(?:_transformer_layers/\d+|layer_with_weights-\d+)"
    r"/_attention_layer/_query_dense/kernel/\.ATTRIBUTES/VARIABLE_VALUE$")
_EMBEDDING_ATTRIBUTES = {
    "_embedding_layer": "embeddings.word_embeddings",
    "_position_embedding_layer": "embeddings.position_embeddings",
    "_type_embedding_layer": "embeddings.token_type_embeddings",
    "_embedding_norm_layer": "embeddings.LayerNorm",
    "_pooler_layer": "pooler.dense",
}
# Keras functional BertEncoder: layer_with_weights-N in construction order.
_FUNCTIONAL_EMBEDDINGS = ("embeddings.word_embeddings", "embeddings.position_embeddings",
                          "embeddings.token_type_embeddings", "embeddings.LayerNorm")
_BLOCK_ATTRIBUTES = {
    ("_attention_layer", "_query_dense"): "attention.self.query",
    ("_attention_layer", "_key_dense"): "attention.self.key",
    ("_attention_layer", "_value_dense"): "attention.self.value",
    ("_attention_layer", "_output_dense"): "attention.output.dense",
    ("_attention_output_dense",): "attention.output.dense",  # tf-models 2.2-2.3 layout
    ("_attention_layer_norm",): "attention.output.LayerNorm",
    ("_intermediate_dense",): "intermediate.dense",
    ("_output_dense",): "output.dense",
    ("_output_layer_norm",): "output.LayerNorm",
}


def _find_encoder_root(keys, prefix: str) -> str:
    roots: set[str] = set()
    for key in keys:
        match = _QUERY_KERNEL_RE.match(key)
        if match:
            roots.add(match.group(1))
    if not roots:
        raise ValueError(f"{prefix}: no BERT encoder found in the checkpoint (expected "
                         "tf.train.Checkpoint(encoder=BertEncoder or BertEncoderV2))")
    if len(roots) > 1:
        raise ValueError(f"{prefix}: several encoders in the checkpoint "
                         f"({', '.join(sorted(roots))})")
    return roots.pop()


def _tf2_to_hf_names(reader, root: str, num_layers: int) -> dict[str, np.ndarray]:
    """tf-models object-checkpoint variables under `root` → HF names and layouts.

    Handles both the attribute paths of BertEncoderV2 (``_transformer_layers/3/...``) and
    the functional BertEncoder's ``layer_with_weights-N`` paths, as well as the older
    ``_attention_output_dense`` block attribute of the first TF2 BERT checkpoints.
    """
    weights = {}
    for key in reader.get_variable_to_shape_map():
        if (not key.startswith(root + "/") or not key.endswith(_VARIABLE_SUFFIX)
                or ".OPTIMIZER_SLOT" in key):
            continue
        path = key[len(root) + 1:-len(_VARIABLE_SUFFIX)].split("/")
        head, rest = path[0], path[1:]
        block = None
        if head.startswith("layer_with_weights-"):
            index = int(head.split("-")[1])
            if index < len(_FUNCTIONAL_EMBEDDINGS):
                module = _FUNCTIONAL_EMBEDDINGS[index]
            elif index < len(_FUNCTIONAL_EMBEDDINGS) + num_layers:
                block = index - len(_FUNCTIONAL_EMBEDDINGS)
            elif index == len(_FUNCTIONAL_EMBEDDINGS) + num_layers:
                module = "pooler.dense"
            else:
                continue
        elif head == "_transformer_layers" and rest:
            block, rest = int(rest[0]), rest[1:]
        elif head in _EMBEDDING_ATTRIBUTES:
            module = _EMBEDDING_ATTRIBUTES[head]
        else:
            continue
        if block is not None:
            module = next((f"encoder.layer.{block}.{name}"
                           for attrs, name in _BLOCK_ATTRIBUTES.items()
                           if tuple(rest[:len(attrs)]) == attrs
                           and len(rest) == len(attrs) + 1), None)
            if module is None:
                continue
        value = reader.get_tensor(key)
        leaf = rest[-1] if rest else ""
        if leaf == "embeddings":
            weights[module + ".weight"] = value
        elif leaf == "gamma":
            weights[module + ".weight"] = value
        elif leaf in ("beta", "bias"):
            weights[module + ".bias"] = value.reshape(-1)
        elif leaf == "kernel":
            # EinsumDense kernels: [in, heads, head] (q/k/v), [heads, head, out] (attention
            # output), [in, out] (the rest); HF layout is [out, in].
            if module.endswith("attention.output.dense"):
                value = value.reshape(-1, value.shape[-1])
            else:
                value = value.reshape(value.shape[0], -1)
            weights[module + ".weight"] = value.T
    return weights


def _restore_tf_checkpoint(encoder, config: EncoderConfig, prefix: str) -> str:
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        raise ValueError(f"{prefix}: not a readable TF checkpoint ({e})") from e
    keys = reader.get_variable_to_shape_map()
    if "bert/embeddings/word_embeddings" in keys:
        _assign_bert_weights(encoder, config, _tf1_to_hf_names(reader), prefix)
        return "tf1-checkpoint"
    root = _find_encoder_root(keys, prefix)
    _assign_bert_weights(encoder, config, _tf2_to_hf_names(reader, root, config.num_layers),
                         prefix)
    return "tf2-checkpoint"
