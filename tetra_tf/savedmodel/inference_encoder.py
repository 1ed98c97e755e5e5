"""BERT's and MPNet's forward pass for inference only, in plain TF ops: what the SavedModel
runs."""

from __future__ import annotations

from tetra_tf import train_extra  # noqa: F401  (first: the [train] extra, Keras 2)

import numpy as np
import tensorflow as tf

from tetra_tf.training import encoders
from tetra_tf.training.mpnet_encoder import MASKED_SCORE_BIAS, relative_position_buckets


class InferenceEncoder(tf.Module):
    """A `BertEncoderV2`'s (or `MPNetEncoder`'s) forward pass for inference, in plain TF
    ops on 2-D matmuls.

    tf-models' layers compute attention and dense layers with einsums over 3-D and 4-D
    tensors; on CPU, one fused query/key/value matmul and plain [tokens, hidden] matmuls
    run the same network about a fifth faster (MiniLM, batch 64). The weights are copied
    (query, key and value kernels fused) at construction, so the SavedModel holds these
    copies, not the Keras encoder's variables. Outputs equal the Keras encoder's to float
    rounding (post-norm blocks, masked softmax, no dropout).

    The query kernel and bias are stored pre-scaled by 1/√head_size, so the attention
    scores need no scaling pass over the [N, heads, L, L] tensor. MPNet's relative position
    bias is added to the padding mask's once per call, so every layer adds one bias as
    BERT's layers do.

    With ``compute_dtype=tf.bfloat16`` the dense layers' kernels are stored in bfloat16 and
    their matmuls run in bfloat16 (oneDNN's AVX-512 BF16 path on CPUs that have it). The
    feed-forward block's inner layer (bias and GELU) stays in bfloat16, since it feeds a
    bfloat16 matmul anyway: oneDNN fuses matmul, bias and GELU, where float32 round trips
    cost a third of the bfloat16 encoder's time. Embeddings, attention scores, softmax,
    residuals and layer norms stay float32.
    """

    def __init__(self, encoder, config: encoders.EncoderConfig,
                 compute_dtype: tf.DType = tf.float32, layer_weights=None):
        """Args:
          encoder: the trained `BertEncoderV2` or `MPNetEncoder`.
          config: its configuration.
          compute_dtype: float32 or bfloat16, for the dense layers' matmuls.
          layer_weights: the tagger's layer mix (`TetraTagger.layer_weights`): the output is
            then Σ weight_k · the k-th of the last len(layer_weights) layers' outputs, not
            the last layer's. None: the last layer's.
        """
        super().__init__(name="inference_encoder")
        if compute_dtype not in (tf.float32, tf.bfloat16):
            raise ValueError(f"compute_dtype must be float32 or bfloat16, got {compute_dtype}")
        self.compute_dtype = compute_dtype
        hidden = config.hidden_size
        self._num_heads = config.num_attention_heads
        self._head_size = config.head_size
        self._epsilon = config.norm_epsilon
        self._activation = config.activation
        self._relative_buckets = config.relative_attention_num_buckets
        self._relative_max_distance = config.relative_attention_max_distance
        # The mix is fixed once trained: Python floats, folded into the graph as constants.
        self._layer_weights = {}
        if layer_weights is not None:
            if not 0 < len(layer_weights) <= config.num_layers:
                raise ValueError(f"{len(layer_weights)} layer weights for an encoder of "
                                 f"{config.num_layers} layers")
            first = config.num_layers - len(layer_weights)
            self._layer_weights = {first + k: float(w) for k, w in enumerate(layer_weights)}
        # pylint: disable=protected-access
        def copy(value, name):
            return tf.Variable(np.asarray(value, dtype=np.float32), trainable=False, name=name)

        def copy_kernel(value, name):
            return tf.Variable(tf.cast(np.asarray(value, dtype=np.float32), compute_dtype),
                               trainable=False, name=name)

        self.word_embeddings = copy(encoder._embedding_layer.embeddings, "word_embeddings")
        self.position_embeddings = copy(
            encoder._position_embedding_layer._position_embeddings, "position_embeddings")
        # type_embeddings: None for MPNet; relative_attention_bias: None for BERT.
        self.type_embeddings = (
            copy(encoder._type_embedding_layer.embeddings, "type_embeddings")
            if encoder._type_embedding_layer is not None else None)
        self.relative_attention_bias = (
            copy(encoder._relative_position_bias._relative_attention_bias,
                 "relative_attention_bias")  # [buckets, heads]
            if self._relative_buckets else None)
        self.embedding_norm = [copy(encoder._embedding_norm_layer.gamma, "embedding_gamma"),
                               copy(encoder._embedding_norm_layer.beta, "embedding_beta")]
        self.blocks = []
        # Query · key / √head_size = (query / √head_size) · key: folded into the query weights.
        query_scale = [1.0 / np.sqrt(self._head_size), 1.0, 1.0]
        for i, block in enumerate(encoder.transformer_layers):
            attention = block._attention_layer
            projections = (attention._query_dense, attention._key_dense, attention._value_dense)
            self.blocks.append({
                "qkv_kernel": copy_kernel(np.concatenate(
                    [p.kernel.numpy().reshape(hidden, hidden) * scale
                     for p, scale in zip(projections, query_scale)], axis=1),
                    f"layer_{i}/qkv_kernel"),
                "qkv_bias": copy(np.concatenate(
                    [p.bias.numpy().reshape(hidden) * scale
                     for p, scale in zip(projections, query_scale)]), f"layer_{i}/qkv_bias"),
                "attention_kernel": copy_kernel(attention._output_dense.kernel.numpy().reshape(
                    hidden, hidden), f"layer_{i}/attention_kernel"),
                "attention_bias": copy(attention._output_dense.bias, f"layer_{i}/attention_bias"),
                "attention_gamma": copy(block._attention_layer_norm.gamma, f"layer_{i}/gamma_1"),
                "attention_beta": copy(block._attention_layer_norm.beta, f"layer_{i}/beta_1"),
                "inner_kernel": copy_kernel(block._intermediate_dense.kernel,
                                            f"layer_{i}/inner_kernel"),
                "inner_bias": copy_kernel(block._intermediate_dense.bias,  # compute_dtype
                                          f"layer_{i}/inner_bias"),
                "output_kernel": copy_kernel(block._output_dense.kernel,
                                             f"layer_{i}/output_kernel"),
                "output_bias": copy(block._output_dense.bias, f"layer_{i}/output_bias"),
                "output_gamma": copy(block._output_layer_norm.gamma, f"layer_{i}/gamma_2"),
                "output_beta": copy(block._output_layer_norm.beta, f"layer_{i}/beta_2"),
            })
        # pylint: enable=protected-access

    def _layer_norm(self, x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        return (x - mean) * tf.math.rsqrt(variance + self._epsilon) * gamma + beta

    def _dense(self, x, kernel, bias):
        """x [T, in] → x·kernel + bias [T, out], the matmul in compute_dtype; the bias is
        added, and the result returned, in the bias's dtype (float32, but compute_dtype for
        the feed-forward inner layer: see the class doc)."""
        return tf.nn.bias_add(
            tf.cast(tf.matmul(tf.cast(x, self.compute_dtype), kernel), bias.dtype), bias)

    def _activate(self, x):
        if self._activation == "gelu":
            return tf.nn.gelu(x, approximate=False)
        if self._activation == "gelu_approximate":
            return tf.nn.gelu(x, approximate=True)
        return tf.nn.relu(x)

    def _position_bias(self, length: tf.Tensor) -> tf.Tensor:
        """MPNet's relative position bias [1, heads, L, L] over a row's columns.

        For a packed row this is each window's own bias as well: a window's pieces lie
        side by side in its row (as `WindowTagger` packs them), so two of them are as far
        apart in columns as in position ids, and pairs across windows are masked.
        """
        columns = tf.range(length)
        buckets = relative_position_buckets(columns[None, :] - columns[:, None],  # key − query
                                            self._relative_buckets, self._relative_max_distance)
        return tf.transpose(tf.gather(self.relative_attention_bias, buckets), [2, 0, 1])[None]

    def __call__(self, input_word_ids: tf.Tensor, input_mask: tf.Tensor,
                 input_type_ids: tf.Tensor, position_ids: tf.Tensor | None = None,
                 segment_ids: tf.Tensor | None = None) -> tf.Tensor:
        """int32 [N, L] inputs → sequence output float32 [N, L, H].

        Args:
          position_ids: each piece's position in its own window; None: 0 … L − 1. A
            window's pieces must lie side by side in its row.
          segment_ids: for rows packed with several windows, the window each piece belongs
            to (> 0; 0 for padding): a piece attends only to pieces of its own window
            (block-diagonal attention). None: one window per row, `input_mask` marks it.
        """
        count, length = tf.shape(input_word_ids)[0], tf.shape(input_word_ids)[1]
        hidden = self.word_embeddings.shape[1]
        positions = (self.position_embeddings[:length][None] if position_ids is None
                     else tf.gather(self.position_embeddings, position_ids))
        x = tf.gather(self.word_embeddings, input_word_ids) + positions
        if self.type_embeddings is not None:
            x += tf.gather(self.type_embeddings, input_type_ids)
        x = tf.reshape(self._layer_norm(x, *self.embedding_norm), [-1, hidden])
        # Keys a query may not see get a large negative score: exp() of it is exactly 0.
        if segment_ids is None:
            mask_bias = ((1.0 - tf.cast(input_mask, tf.float32))[:, None, None, :]
                         * MASKED_SCORE_BIAS)
        else:
            same_window = (tf.equal(segment_ids[:, :, None], segment_ids[:, None, :])
                           & (segment_ids[:, None, :] > 0))
            mask_bias = ((1.0 - tf.cast(same_window, tf.float32))[:, None, :, :]
                         * MASKED_SCORE_BIAS)
        if self.relative_attention_bias is not None:
            mask_bias += self._position_bias(length)
        mixed = None
        for i, block in enumerate(self.blocks):
            qkv = self._dense(x, block["qkv_kernel"], block["qkv_bias"])
            qkv = tf.transpose(
                tf.reshape(qkv, [count, length, 3, self._num_heads, self._head_size]),
                [2, 0, 3, 1, 4])  # [3, N, heads, L, head size]
            scores = tf.matmul(qkv[0], qkv[1], transpose_b=True) + mask_bias
            context = tf.matmul(tf.nn.softmax(scores), qkv[2])
            context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, hidden])
            attention = self._dense(context, block["attention_kernel"], block["attention_bias"])
            x = self._layer_norm(x + attention, block["attention_gamma"],
                                 block["attention_beta"])
            inner = self._activate(self._dense(x, block["inner_kernel"], block["inner_bias"]))
            output = self._dense(inner, block["output_kernel"], block["output_bias"])
            x = self._layer_norm(x + output, block["output_gamma"], block["output_beta"])
            if i in self._layer_weights:
                term = self._layer_weights[i] * x
                mixed = term if mixed is None else mixed + term
        return tf.reshape(x if mixed is None else mixed, [count, length, hidden])
