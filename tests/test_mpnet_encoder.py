"""The MPNet encoder: a tiny HuggingFace MPNet checkpoint (written with NumPy) through the
Keras encoder and the export's encoder, both held against an independent NumPy forward
pass of HuggingFace's MPNetModel; its tokenizer's special tokens; its config."""

import json
import math
import os

import numpy as np
import pytest

import tensorflow as tf
from safetensors.numpy import load_file

from tetra_tf.savedmodel.inference_encoder import InferenceEncoder
from tetra_tf.training import encoders

from conftest import MPNET_SPECIAL_TOKENS, write_tiny_mpnet


def _bucket(relative: np.ndarray, num_buckets: int, max_distance: int) -> np.ndarray:
    """HF MPNetEncoder.relative_position_bucket, in NumPy (float32 logs, as torch's)."""
    n = -relative
    half = num_buckets // 2
    result = (n < 0).astype(np.int64) * half
    n = np.abs(n)
    max_exact = half // 2
    large = max_exact + (np.log(np.maximum(n, 1).astype(np.float32) / np.float32(max_exact))
                         / np.float32(math.log(max_distance / max_exact))
                         * np.float32(half - max_exact)).astype(np.int64)
    large = np.minimum(large, half - 1)
    return result + np.where(n < max_exact, n, large)


def _layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


_erf = np.vectorize(math.erf)


def mpnet_forward(directory: str, input_ids: np.ndarray, attention_mask: np.ndarray
                  ) -> np.ndarray:
    """HF's MPNetModel(input_ids, attention_mask).last_hidden_state, in float64 NumPy."""
    config = json.load(open(os.path.join(directory, "config.json")))
    w = {k: v.astype(np.float64) for k, v in
         load_file(os.path.join(directory, "model.safetensors")).items()}
    heads, eps = config["num_attention_heads"], config["layer_norm_eps"]
    pad = config["pad_token_id"]
    # create_position_ids_from_input_ids: padding_idx + the piece's 1-based rank.
    not_pad = (input_ids != pad).astype(np.int64)
    position_ids = np.cumsum(not_pad, axis=1) * not_pad + pad
    x = (w["embeddings.word_embeddings.weight"][input_ids]
         + w["embeddings.position_embeddings.weight"][position_ids])
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    length = input_ids.shape[1]
    relative = np.arange(length)[None, :] - np.arange(length)[:, None]
    # MPNetEncoder.compute_position_bias buckets with its defaults, whatever the config.
    bias = w["encoder.relative_attention_bias.weight"][_bucket(relative, 32, 128)]
    bias = bias.transpose(2, 0, 1)[None]
    extended_mask = (1.0 - attention_mask[:, None, None, :]) * np.finfo(np.float32).min
    batch, hidden = x.shape[0], x.shape[2]
    size = hidden // heads

    def dense(h, name):
        return h @ w[name + ".weight"].T + w[name + ".bias"]

    def split(h):
        return h.reshape(batch, length, heads, size).transpose(0, 2, 1, 3)

    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q, k, v = (split(dense(x, p + f"attention.attn.{n}")) for n in "qkv")
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + bias + extended_mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probabilities = scores / scores.sum(-1, keepdims=True)
        context = (probabilities @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        x = _layer_norm(dense(context, p + "attention.attn.o") + x,
                        w[p + "attention.LayerNorm.weight"], w[p + "attention.LayerNorm.bias"],
                        eps)
        inner = dense(x, p + "intermediate.dense")
        inner = 0.5 * inner * (1.0 + _erf(inner / math.sqrt(2.0)))
        x = _layer_norm(dense(inner, p + "output.dense") + x, w[p + "output.LayerNorm.weight"],
                        w[p + "output.LayerNorm.bias"], eps)
    return x


@pytest.fixture(scope="module")
def pretrained(tiny_mpnet_dir):
    return encoders.load_pretrained_encoder(tiny_mpnet_dir)


@pytest.fixture(scope="module")
def windows(pretrained):
    """<s> … </s> windows of 160, 37 and 1 pieces, padded with <pad> (distances past the
    bias's 128, so every bucket is used)."""
    tokenizer = pretrained.config.tokenizer(pretrained.vocab_path)
    rng = np.random.default_rng(1)
    lengths = [160, 37, 1]
    width = max(lengths) + 2
    ids = np.full([len(lengths), width], tokenizer.pad_id, np.int32)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n + 2] = [tokenizer.cls_id, *rng.integers(1000, 20000, n), tokenizer.sep_id]
        mask[row, :n + 2] = 1
    return ids, mask


def test_keras_encoder_equals_hf_mpnet_forward_pass(tiny_mpnet_dir, pretrained, windows):
    ids, mask = windows
    expected = mpnet_forward(tiny_mpnet_dir, ids, mask)
    got = pretrained.encoder(dict(input_word_ids=ids, input_mask=mask,
                                  input_type_ids=np.zeros_like(ids)),
                             training=False)["sequence_output"].numpy()
    real = mask.astype(bool)
    assert np.abs(expected[real]).max() > 0.5  # a non-trivial output
    np.testing.assert_allclose(got[real], expected[real], atol=1e-4, rtol=0)


def test_export_encoder_equals_hf_mpnet_forward_pass(tiny_mpnet_dir, pretrained, windows):
    ids, mask = windows
    expected = mpnet_forward(tiny_mpnet_dir, ids, mask)
    encoder = InferenceEncoder(pretrained.encoder, pretrained.config)
    assert encoder.type_embeddings is None and encoder.relative_attention_bias is not None
    got = encoder(tf.constant(ids), tf.constant(mask), tf.zeros_like(ids)).numpy()
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], expected[real], atol=1e-4, rtol=0)
    # Packed: the three windows in one row, each with its own positions and attending to
    # itself alone, give each window's features (the bias from its position ids).
    lengths = mask.sum(1)
    row = np.concatenate([ids[r, :n] for r, n in enumerate(lengths)])[None]
    positions = np.concatenate([np.arange(n) for n in lengths])[None].astype(np.int32)
    segments = np.concatenate([np.full(n, r + 1) for r, n in enumerate(lengths)])[None]
    packed = encoder(tf.constant(row), tf.ones_like(row), tf.zeros_like(row),
                     position_ids=tf.constant(positions),
                     segment_ids=tf.constant(segments.astype(np.int32))).numpy()[0]
    np.testing.assert_allclose(packed, expected[real], atol=1e-4, rtol=0)


def test_config_comes_from_the_checkpoint(pretrained):
    config = pretrained.config
    assert (config.model_type, config.type_vocab_size, config.relative_attention_num_buckets,
            config.relative_attention_max_distance) == ("mpnet", 0, 32, 128)
    # fairseq's two padding rows are not positions: 202 rows serve 200 pieces.
    assert config.max_sequence_length == 200
    assert config.norm_epsilon == 1e-5 and config.do_lower_case
    assert pretrained.encoder._position_embedding_layer._position_embeddings.shape[0] == 200
    assert pretrained.source == "hf-safetensors"


def test_tokenizer_uses_the_checkpoints_special_tokens(pretrained):
    tokenizer = pretrained.config.tokenizer(pretrained.vocab_path)
    vocab = open(pretrained.vocab_path, encoding="utf-8").read().splitlines()
    # The vocabulary holds BERT's [CLS]/[SEP]/[PAD] too; the checkpoint's own are used.
    assert {"[CLS]", "[SEP]", "[PAD]"} <= set(vocab)
    assert ([vocab[i] for i in (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                                tokenizer.unk_id)] == ["<s>", "</s>", "<pad>", "[UNK]"])
    packed = tokenizer.tokenize_and_pack(tf.ragged.constant([["The", "cat", "\u2603"]]), 8)
    ids = packed["input_word_ids"].numpy()[0, 0].tolist()
    assert [vocab[i] for i in ids] == ["<s>", "the", "cat", "[UNK]", "</s>", "<pad>", "<pad>",
                                       "<pad>"]


@pytest.mark.parametrize("remove", ["special_tokens_map.json", "both"])
def test_special_tokens_must_be_named_by_the_checkpoint(tmp_path, remove):
    directory = write_tiny_mpnet(str(tmp_path), layers=1)
    if remove == "both":
        os.remove(os.path.join(directory, "special_tokens_map.json"))
        os.remove(os.path.join(directory, "tokenizer_config.json"))
        with pytest.raises(ValueError, match="special_tokens_map.json or tokenizer_config"):
            encoders.load_pretrained_encoder(directory)
        return
    # tokenizer_config.json alone names them: enough. Without its pad_token: refused.
    os.remove(os.path.join(directory, remove))
    assert encoders.load_pretrained_encoder(directory).config.pad_token == "<pad>"
    tokens = {k: v for k, v in MPNET_SPECIAL_TOKENS.items() if k != "pad_token"}
    json.dump({"do_lower_case": True, **tokens},
              open(os.path.join(directory, "tokenizer_config.json"), "w"))
    with pytest.raises(ValueError, match="names the pad_token"):
        encoders.load_pretrained_encoder(directory)


def test_hf_mpnet_weights_with_a_model_prefix_load_the_same(tmp_path, tiny_mpnet_dir,
                                                            pretrained, windows):
    # MPNetForMaskedLM (microsoft/mpnet-base) prefixes "mpnet." and adds an LM head.
    from safetensors.numpy import save_file

    directory = write_tiny_mpnet(str(tmp_path))
    weights = load_file(os.path.join(directory, "model.safetensors"))
    weights = {"mpnet." + name: value for name, value in weights.items()}
    weights["lm_head.dense.weight"] = np.zeros([16, 16], np.float32)
    save_file(weights, os.path.join(directory, "model.safetensors"))
    prefixed = encoders.load_pretrained_encoder(directory)
    assert len(prefixed.encoder.variables) == len(pretrained.encoder.variables)
    for a, b in zip(prefixed.encoder.variables, pretrained.encoder.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_special_tokens_may_be_added_token_dicts(tmp_path):
    directory = write_tiny_mpnet(str(tmp_path), layers=1)
    tokens = {key: {"content": value, "lstrip": False, "normalized": False}
              for key, value in MPNET_SPECIAL_TOKENS.items()}
    json.dump(tokens, open(os.path.join(directory, "special_tokens_map.json"), "w"))
    os.remove(os.path.join(directory, "tokenizer_config.json"))
    config = encoders.load_pretrained_encoder(directory).config
    assert (config.cls_token, config.sep_token, config.pad_token, config.unk_token) == (
        "<s>", "</s>", "<pad>", "[UNK]")


def test_a_position_table_that_disagrees_with_the_config_is_refused(tmp_path):
    from safetensors.numpy import save_file

    directory = write_tiny_mpnet(str(tmp_path), layers=1)
    weights = load_file(os.path.join(directory, "model.safetensors"))
    table = weights["embeddings.position_embeddings.weight"]
    weights["embeddings.position_embeddings.weight"] = table[1:]  # one padding row only
    save_file(weights, os.path.join(directory, "model.safetensors"))
    with pytest.raises(ValueError, match="has 201 rows; the config says 2 padding rows and "
                                         "200 positions"):
        encoders.load_pretrained_encoder(directory)


def test_mpnet_config_checks():
    small = dict(vocab_size=10, hidden_size=8, num_attention_heads=2)
    with pytest.raises(ValueError, match="type_vocab_size 2: an MPNet encoder has no segment"):
        encoders.EncoderConfig(**small, model_type="mpnet", relative_attention_num_buckets=32)
    for buckets in (0, 3, 7):
        with pytest.raises(ValueError, match=f"num_buckets {buckets}: .* even number >= 4"):
            encoders.EncoderConfig(**small, model_type="mpnet", type_vocab_size=0,
                                   relative_attention_num_buckets=buckets)
    with pytest.raises(ValueError, match="num_buckets 32: a BERT encoder has no relative"):
        encoders.EncoderConfig(**small, relative_attention_num_buckets=32)
    hf = {"model_type": "mpnet", "vocab_size": 10, "hidden_size": 8, "num_hidden_layers": 1,
          "num_attention_heads": 2, "intermediate_size": 16}
    # HF's MPNet buckets into 32 whatever its config says: another table is refused.
    with pytest.raises(ValueError, match="buckets relative positions into 32"):
        encoders.EncoderConfig.from_hf_config(dict(hf, relative_attention_num_buckets=64),
                                              special_tokens=encoders.SpecialTokens())
    with pytest.raises(ValueError, match="model_type"):
        encoders.EncoderConfig(vocab_size=10, hidden_size=8, num_attention_heads=2,
                               model_type="roberta")
    with pytest.raises(ValueError, match="special tokens"):
        encoders.EncoderConfig.from_hf_config(hf)
