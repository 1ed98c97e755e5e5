"""The tagger: a BERT encoder with per-word projection heads (paper §3.2).

Each word is represented by the encoder's output at its last subword: the last layer's, or a
learned mix of the last few layers (ELMo's scalar mix; `HeadsConfig.mixed_layers`). From
that one vector three linear heads score the word's leaf tag, the internal tag of the
fencepost after the word, and (beyond the paper) its part of speech, so raw words parse
without a POS tagger. With `HeadsConfig.internal_uses_next_word` the internal tag's head
reads the next word's vector too.
"""

from __future__ import annotations

import dataclasses

from tetra_tf import train_extra  # noqa: F401  (first: the [train] extra, Keras 2)

import numpy as np
import tensorflow as tf
import tf_keras

from tetra_tf.data import records

ENCODER_INPUTS = ("input_word_ids", "input_mask", "input_type_ids")
# The logits each head gives, keyed by the record feature that holds its gold tag ids.
LOGIT_KEYS = {records.LEAF_TAG_IDS: "leaf_logits", records.INTERNAL_TAG_IDS: "internal_logits",
              records.POS_TAG_IDS: "pos_logits"}


@dataclasses.dataclass
class HeadsConfig:
    """Sizes of the three output vocabularies, the dropout before the heads, how many
    of the encoder's last layers make the word features (1: the last layer alone), and
    whether a fencepost's internal tag also sees the word after it (False: the word before
    alone, as in the paper)."""

    num_leaf_tags: int
    num_internal_tags: int
    num_pos_tags: int
    dropout_rate: float = 0.1
    mixed_layers: int = 1
    internal_uses_next_word: bool = False


class ScalarMix(tf_keras.layers.Layer):
    """γ · Σ softmax(s)_k · layer_k over the encoder's last `num_layers` layers (Peters et
    al. 2018), s and γ learned; s starts at 0 (an even mix), γ at 1."""

    def __init__(self, num_layers: int, **kwargs):
        super().__init__(**kwargs)
        self.num_layers = num_layers

    def build(self, input_shape):
        self.layer_logits = self.add_weight(
            "layer_logits", [self.num_layers], initializer="zeros", dtype=tf.float32)
        self.gamma = self.add_weight("gamma", [], initializer="ones", dtype=tf.float32)
        super().build(input_shape)

    def layer_weights(self) -> tf.Tensor:
        """The factor of each mixed layer, oldest first: γ · softmax(s)."""
        return self.gamma * tf.nn.softmax(self.layer_logits)

    def call(self, layers: list) -> tf.Tensor:
        weights = self.layer_weights()
        return tf.add_n([weights[k] * tf.cast(layer, weights.dtype)
                         for k, layer in enumerate(layers)])


class TetraTagger(tf_keras.Model):
    """Scores leaf, internal and POS tags for every word of a batch of sentences.

    Inputs (a dict):
      input_word_ids, input_mask, input_type_ids: int32 [B, F, L], each sentence split
        into F windows of L subwords (F = 1 unless a sentence exceeds the encoder).
      word_end_positions: int32 [B, W], per word the position of its last subword in the
        sentence's F·L flattened window positions.

    Returns:
      A dict of float32 logits [B, W, V]: leaf_logits, internal_logits (for the fencepost
      after each word; the last word's is meaningless) and pos_logits.
    """

    def __init__(self, encoder: tf_keras.Model, heads: HeadsConfig, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.heads_config = heads
        self.feature_dropout = tf_keras.layers.Dropout(heads.dropout_rate)
        def head(size: int, name: str) -> tf_keras.layers.Dense:
            return tf_keras.layers.Dense(
                size, kernel_initializer=tf_keras.initializers.TruncatedNormal(stddev=0.02),
                name=name)

        self.leaf_head = head(heads.num_leaf_tags, "leaf_head")
        self.internal_head = head(heads.num_internal_tags, "internal_head")
        self.pos_head = head(heads.num_pos_tags, "pos_head")
        # float32 even under mixed precision: the export folds the float32 mix.
        self.scalar_mix = (ScalarMix(heads.mixed_layers, name="scalar_mix", dtype="float32")
                           if heads.mixed_layers > 1 else None)

    def sequence_features(self, flat_inputs: dict, training=None) -> tf.Tensor:
        """[N, L] encoder inputs → every subword's features [N, L, H]: the last layer's
        output, or the scalar mix of the last `mixed_layers` layers."""
        outputs = self.encoder(flat_inputs, training=training)
        if self.scalar_mix is None:
            return outputs["sequence_output"]
        return self.scalar_mix(outputs["encoder_outputs"][-self.heads_config.mixed_layers:])

    def layer_weights(self) -> np.ndarray | None:
        """The factors of the mixed layers as a numpy array, oldest first (None: no mix)."""
        return None if self.scalar_mix is None else self.scalar_mix.layer_weights().numpy()

    def word_features(self, inputs: dict, training=None) -> tf.Tensor:
        """Returns the encoder output at each word's last subword: [B, W, H]."""
        ids = inputs["input_word_ids"]
        shape = tf.shape(ids)
        batch_size, windows, length = shape[0], shape[1], shape[2]
        flat = {key: tf.reshape(inputs[key], [-1, length]) for key in ENCODER_INPUTS}
        sequence = self.sequence_features(flat, training=training)
        sequence = tf.reshape(sequence, [batch_size, windows * length, -1])
        return tf.gather(sequence, inputs["word_end_positions"], batch_dims=1)

    def head_logits(self, features: tf.Tensor) -> dict:
        """Word features [B, W, H] → the three heads' float32 logits [B, W, V].

        Training (through `call`) and the export (on features it computes its own way)
        both score words here.
        """
        fencepost_features = features
        if self.heads_config.internal_uses_next_word:
            # [word i; word i + 1] for the fencepost after word i. After a sentence's last
            # word comes padding (or zeros): that fencepost is never scored. Padding first,
            # then shifting, keeps a batch of no words [B, 0, H].
            next_words = tf.pad(features, [[0, 0], [0, 1], [0, 0]])[:, 1:]
            fencepost_features = tf.concat([features, next_words], axis=-1)
        return {
            "leaf_logits": tf.cast(self.leaf_head(features), tf.float32),
            "internal_logits": tf.cast(self.internal_head(fencepost_features), tf.float32),
            "pos_logits": tf.cast(self.pos_head(features), tf.float32),
        }

    def call(self, inputs: dict, training=None) -> dict:
        features = self.feature_dropout(self.word_features(inputs, training), training=training)
        return self.head_logits(features)

    def encoder_variable_groups(self) -> list[list[tf.Variable]]:
        """The encoder's trained variables by depth, bottom first: the embeddings (and
        MPNet's relative position bias, which every layer shares), then each transformer
        layer. The pooler, which tagging never uses, is left out."""
        trained = [v for v in self.encoder.trainable_variables if "pooler" not in v.name]
        layers = [list(layer.trainable_variables) for layer in self.encoder.transformer_layers]
        in_layers = {id(v) for layer in layers for v in layer}
        return [[v for v in trained if id(v) not in in_layers]] + layers

    @property
    def tag_head_variables(self) -> list[tf.Variable]:
        """The three tag heads' variables (what `head_logits` uses)."""
        return (self.leaf_head.trainable_variables + self.internal_head.trainable_variables
                + self.pos_head.trainable_variables)

    @property
    def head_variables(self) -> list[tf.Variable]:
        """The variables on top of the encoder (tag heads and layer mix), trained at the
        head learning rate."""
        mix = self.scalar_mix.trainable_variables if self.scalar_mix is not None else []
        return self.tag_head_variables + mix


def mean_log_probabilities(outputs: list[dict]) -> dict:
    """An ensemble's tag scores: its members' log-softmaxed logits, averaged per output.

    Args:
      outputs: each member's logits (leaf_logits, internal_logits, pos_logits).

    Returns:
      The same keys; the decoder takes them as it takes one model's log-softmax.
    """
    return {key: tf.add_n([tf.nn.log_softmax(o[key]) for o in outputs]) / len(outputs)
            for key in outputs[0]}


def tagging_loss_terms(outputs: dict, labels: dict, distillation_weight: float = 0.0,
                       label_smoothing: float = 0.0) -> dict[str, tuple[tf.Tensor, tf.Tensor]]:
    """Returns per head (sum of token cross-entropies, number of tokens).

    Labels of −1 (padding, the fencepost after the last word, tags unseen in training)
    never reach the loss. Sums and counts are kept apart so that the caller can normalize
    by the count over the whole global batch, which keeps every replica count equal.

    Args:
      outputs: the model's logits.
      labels: the gold tag ids; with a distillation weight, also the teacher's
        log-probabilities (records.TEACHER_LOG_PROBS).
      distillation_weight: w in (1 − w) · CE(gold) + w · CE(teacher's distribution) per
        token (0: the gold tags alone).
      label_smoothing: ε: the gold term's target is (1 − ε) · one-hot + ε · uniform over
        the head's tags (0: the one-hot alone).
    """
    terms = {}
    for label_key in records.TAG_ID_FEATURES:
        ids = labels[label_key]
        mask = tf.cast(ids >= 0, tf.float32)
        logits = outputs[LOGIT_KEYS[label_key]]
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.maximum(ids, 0), logits=logits)
        if label_smoothing:
            uniform = -tf.reduce_mean(tf.nn.log_softmax(logits), axis=-1)
            losses = (1.0 - label_smoothing) * losses + label_smoothing * uniform
        if distillation_weight:
            teacher = tf.exp(labels[records.TEACHER_LOG_PROBS[label_key]])
            soft = tf.nn.softmax_cross_entropy_with_logits(labels=teacher, logits=logits)
            losses = (1.0 - distillation_weight) * losses + distillation_weight * soft
        terms[label_key] = (tf.reduce_sum(losses * mask), tf.reduce_sum(mask))
    return terms
