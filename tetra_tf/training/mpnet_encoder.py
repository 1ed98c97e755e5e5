"""MPNet's encoder (Song et al., 2020) as a Keras layer, from tf-models' building blocks.

MPNet is BERT's post-LN transformer with two differences:

* no segment (token type) embeddings: word + absolute position embeddings, then LayerNorm;
* one T5-style relative position bias (bidirectional buckets, max distance 128), computed
  once from the pieces' distances and added to every layer's attention scores before the
  padding mask.

HuggingFace checkpoints keep fairseq's position table, whose rows 0 and 1 belong to padding
(the first real piece uses row padding_idx + 1 = 2); the weight import
(`tetra_tf.training.encoders`) drops them, so that here, as in BERT, row 0 serves the first piece.

The layer mirrors `BertEncoderV2`'s interface (the same inputs, ``sequence_output`` and
``encoder_outputs``, the attributes the export and the layer-wise learning rates read), so
the tagger, training and the export take either.
"""

from __future__ import annotations

from tetra_tf import train_extra  # noqa: F401  (first: the [train] extra, Keras 2)

import tensorflow as tf
import tf_keras
from official.modeling import tf_utils
from official.nlp.modeling import layers
from official.nlp.modeling.layers import position_embedding

# What a masked key adds to an attention score: exp() of it is exactly 0 in float32 and
# bfloat16 alike.
MASKED_SCORE_BIAS = -1e9


def relative_position_buckets(relative_positions: tf.Tensor, num_buckets: int,
                              max_distance: int) -> tf.Tensor:
    """T5's bidirectional buckets of (key − query) distances, as `RelativePositionBias`
    computes them: for the export's encoder, which adds the bias in plain TF ops."""
    # pylint: disable=protected-access
    return position_embedding._relative_position_bucket(
        relative_positions, bidirectional=True, num_buckets=num_buckets,
        max_distance=max_distance)


class AdditiveBiasAttention(tf_keras.layers.MultiHeadAttention):
    """Multi-head attention whose ``attention_mask`` is an additive bias on the scores:
    float [B, heads, T, S], 0 (or a position bias) where a query may attend, a large
    negative number where it may not."""

    def _masked_softmax(self, attention_scores, attention_mask=None):
        if attention_mask is not None:
            attention_scores += tf.cast(attention_mask, attention_scores.dtype)
        return self._softmax(attention_scores)


class BiasedTransformerEncoderBlock(layers.TransformerEncoderBlock):
    """tf-models' transformer block, called as ``[x, attention_bias]``: its attention adds
    the bias to the scores (`AdditiveBiasAttention`) instead of reading a 0/1 mask."""

    def build(self, input_shape):
        super().build(input_shape)
        # Replaced before its first call, so no variables of the plain attention exist.
        config = self._attention_layer.get_config()
        for unbuilt in ("query_shape", "key_shape", "value_shape"):
            config.pop(unbuilt, None)
        self._attention_layer = AdditiveBiasAttention(**config)


class MPNetEncoder(tf_keras.layers.Layer):
    """MPNet's encoder network.

    Takes ``dict(input_word_ids, input_mask, input_type_ids)`` int32 [batch, length]
    (``input_type_ids`` is ignored: MPNet has no segments) and returns a dict with
    ``sequence_output`` [batch, length, hidden_size] and ``encoder_outputs`` (every
    layer's output, bottom first).
    """

    def __init__(self, vocab_size: int, hidden_size: int = 768, num_layers: int = 12,
                 num_attention_heads: int = 12, max_sequence_length: int = 512,
                 inner_dim: int = 3072, inner_activation="gelu", output_dropout: float = 0.1,
                 attention_dropout: float = 0.1, norm_epsilon: float = 1e-5,
                 relative_attention_num_buckets: int = 32,
                 relative_attention_max_distance: int = 128,
                 initializer=None, **kwargs):
        super().__init__(**kwargs)
        initializer = tf_keras.initializers.get(
            initializer or tf_keras.initializers.TruncatedNormal(stddev=0.02))
        self._config = {
            "vocab_size": vocab_size, "hidden_size": hidden_size, "num_layers": num_layers,
            "num_attention_heads": num_attention_heads,
            "max_sequence_length": max_sequence_length, "inner_dim": inner_dim,
            "inner_activation": tf_utils.serialize_activation(
                tf_keras.activations.get(inner_activation), use_legacy_format=True),
            "output_dropout": output_dropout, "attention_dropout": attention_dropout,
            "norm_epsilon": norm_epsilon,
            "relative_attention_num_buckets": relative_attention_num_buckets,
            "relative_attention_max_distance": relative_attention_max_distance,
            "initializer": tf_utils.serialize_initializer(initializer, use_legacy_format=True),
        }
        self._embedding_layer = layers.OnDeviceEmbedding(
            vocab_size=vocab_size, embedding_width=hidden_size,
            initializer=tf_utils.clone_initializer(initializer), name="word_embeddings")
        self._position_embedding_layer = layers.PositionEmbedding(
            initializer=tf_utils.clone_initializer(initializer),
            max_length=max_sequence_length, name="position_embedding")
        self._type_embedding_layer = None
        self._embedding_norm_layer = tf_keras.layers.LayerNormalization(
            name="embeddings/layer_norm", axis=-1, epsilon=norm_epsilon, dtype=tf.float32)
        self._embedding_dropout = tf_keras.layers.Dropout(rate=output_dropout,
                                                          name="embedding_dropout")
        self._relative_position_bias = layers.RelativePositionBias(
            num_heads=num_attention_heads,
            relative_attention_num_buckets=relative_attention_num_buckets,
            relative_attention_max_distance=relative_attention_max_distance,
            bidirectional=True, embeddings_initializer=tf_utils.clone_initializer(initializer),
            name="relative_position_bias")
        self._transformer_layers = [
            BiasedTransformerEncoderBlock(
                num_attention_heads=num_attention_heads, inner_dim=inner_dim,
                inner_activation=inner_activation, output_dropout=output_dropout,
                attention_dropout=attention_dropout, norm_epsilon=norm_epsilon,
                kernel_initializer=tf_utils.clone_initializer(initializer),
                name=f"transformer/layer_{i}")
            for i in range(num_layers)]

    def call(self, inputs: dict) -> dict:
        word_embeddings = self._embedding_layer(inputs["input_word_ids"])
        embeddings = word_embeddings + self._position_embedding_layer(word_embeddings)
        x = self._embedding_dropout(self._embedding_norm_layer(embeddings))
        # One [1, heads, L, L] bias for the batch (every row's positions are 0 … L − 1; the
        # layer reads only the shapes of its query and key), plus each row's padding mask
        # on the keys; cast once to the blocks' compute dtype.
        position_bias = self._relative_position_bias(x[:1], x[:1])
        key_is_padding = 1.0 - tf.cast(inputs["input_mask"], tf.float32)
        attention_bias = tf.cast(
            tf.cast(position_bias, tf.float32)
            + key_is_padding[:, None, None, :] * MASKED_SCORE_BIAS,
            self._transformer_layers[0].compute_dtype)
        encoder_outputs = []
        for layer in self._transformer_layers:
            x = layer([x, attention_bias])
            encoder_outputs.append(x)
        return {"sequence_output": encoder_outputs[-1], "encoder_outputs": encoder_outputs}

    @property
    def transformer_layers(self) -> list:
        """The transformer blocks, bottom first."""
        return self._transformer_layers

    def get_embedding_table(self):
        return self._embedding_layer.embeddings

    def get_config(self) -> dict:
        return dict(self._config)
