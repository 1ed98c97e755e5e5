"""Encoder config, construction and pretrained weight import (HF safetensors, TF1/TF2)."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from official.nlp.modeling import networks
from safetensors.numpy import load_file, save_file

from tetra_tf.training import encoders

SENTENCES = [
    "Pierre Vinken, 61 years old, will join the board as a nonexecutive director Nov. 29.",
    "Mr. Vinken is chairman of Elsevier N.V., the Dutch publishing group.",
    "The quick brown fox jumps over the lazy dog.",
    "Rudolph Agnew, 55 years old and former chairman of Consolidated Gold Fields PLC, was "
    "named a nonexecutive director of this British industrial conglomerate.",
]

# Runs in a separate process: importing torch after TensorFlow crashes this environment.
_HF_REFERENCE_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, torch, transformers
    directory, output, sentences = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    model = transformers.BertModel.from_pretrained(directory).eval()
    tokenizer = transformers.BertTokenizerFast.from_pretrained(directory)
    batch = tokenizer(sentences, padding=True, return_tensors="np")
    with torch.no_grad():
        out = model(input_ids=torch.tensor(batch["input_ids"]),
                    attention_mask=torch.tensor(batch["attention_mask"]),
                    token_type_ids=torch.tensor(batch["token_type_ids"]))
    np.savez(output, input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
             token_type_ids=batch["token_type_ids"], sequence_output=out.last_hidden_state.numpy())
""")


@pytest.fixture(scope="module")
def minilm():
    return encoders.load_pretrained_encoder()


@pytest.fixture(scope="module")
def hf_reference(tmp_path_factory):
    """Token ids and sequence outputs of transformers' BertModel for SENTENCES."""
    if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")):
        pytest.skip("the PyTorch oracle needs torch and transformers (the [bench] extra)")
    directory = tmp_path_factory.mktemp("hf_reference")
    script, output = directory / "reference.py", directory / "reference.npz"
    script.write_text(_HF_REFERENCE_SCRIPT)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    result = subprocess.run(
        [sys.executable, str(script), encoders.default_encoder_dir(), str(output),
         json.dumps(SENTENCES)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(np.load(output))


def _encode(encoder, ids, mask, type_ids=None):
    ids = tf.constant(ids, tf.int32)
    type_ids = tf.zeros_like(ids) if type_ids is None else tf.constant(type_ids, tf.int32)
    return encoder(dict(input_word_ids=ids, input_mask=tf.constant(mask, tf.int32),
                        input_type_ids=type_ids))["sequence_output"].numpy()


def _numpy_bert(weights, config, ids, mask):
    """Plain NumPy BERT forward pass (post-norm, exact GELU) from HF-named weights."""
    from scipy.special import erf  # pylint: disable=import-outside-toplevel

    def layer_norm(x, prefix):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return ((x - mean) / np.sqrt(var + config.norm_epsilon) * weights[prefix + ".weight"]
                + weights[prefix + ".bias"])

    def linear(x, prefix):
        return x @ weights[prefix + ".weight"].T + weights[prefix + ".bias"]

    batch, length = ids.shape
    heads, head_size = config.num_attention_heads, config.head_size
    x = (weights["embeddings.word_embeddings.weight"][ids]
         + weights["embeddings.position_embeddings.weight"][:length][None]
         + weights["embeddings.token_type_embeddings.weight"][0][None, None])
    x = layer_norm(x.astype(np.float64), "embeddings.LayerNorm")
    bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9)
    for i in range(config.num_layers):
        p = f"encoder.layer.{i}."

        def split(t):
            return t.reshape(batch, length, heads, head_size).transpose(0, 2, 1, 3)

        q, k, v = (split(linear(x, p + f"attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(head_size) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, -1)
        x = layer_norm(x + linear(context, p + "attention.output.dense"),
                       p + "attention.output.LayerNorm")
        inner = linear(x, p + "intermediate.dense")
        inner = 0.5 * inner * (1.0 + erf(inner / np.sqrt(2.0)))
        x = layer_norm(x + linear(inner, p + "output.dense"), p + "output.LayerNorm")
    return x


def test_minilm_config(minilm):
    config = minilm.config
    assert (config.num_layers, config.hidden_size, config.num_attention_heads) == (6, 384, 12)
    assert config.intermediate_size == 1536 and config.max_sequence_length == 512
    assert config.activation == "gelu" and config.do_lower_case
    # Loaded from the default encoder's directory, with its vocabulary.
    assert minilm.vocab_path == os.path.join(encoders.default_encoder_dir(), "vocab.txt")
    assert os.path.exists(minilm.vocab_path)
    assert minilm.source == "hf-safetensors"


@pytest.mark.slow
def test_minilm_matches_transformers(minilm, hf_reference):
    mask = hf_reference["attention_mask"]
    assert (mask == 0).any(), "the batch should contain padding"
    ours = _encode(minilm.encoder, hf_reference["input_ids"], mask,
                   hf_reference["token_type_ids"])
    diff = np.abs(ours - hf_reference["sequence_output"])
    # All positions, padded ones included (their queries still attend to real tokens).
    assert diff.max() <= 1e-4, diff.max()


def test_minilm_matches_numpy_forward(minilm):
    weights = load_file(os.path.join(encoders.default_encoder_dir(), "model.safetensors"))
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, size=(2, 20))
    ids[:, 0], ids[0, 19], ids[1, 12] = 101, 102, 102
    mask = np.ones_like(ids)
    mask[1, 13:] = 0
    ids[1, 13:] = 0
    expected = _numpy_bert(weights, minilm.config, ids, mask)
    ours = _encode(minilm.encoder, ids, mask)
    assert np.abs(ours - expected).max() <= 1e-4


def test_every_encoder_variable_is_trainable(minilm):
    variables = minilm.encoder.variables
    # 5 embedding variables + 16 per block + 2 pooler.
    assert len(variables) == 5 + 16 * 6 + 2
    assert all(v.trainable for v in variables)
    assert len(minilm.encoder.trainable_variables) == len(variables)


# ------------------------------------------------------------------------------------------
# Small random encoders: TF checkpoints and our own config.

TINY = dict(vocab_size=40, hidden_size=16, num_layers=2, num_attention_heads=4,
            intermediate_size=32, max_sequence_length=24, type_vocab_size=2)
TINY_IDS = np.array([[2, 5, 6, 7, 3, 0, 0], [2, 8, 9, 10, 11, 12, 3]])
TINY_MASK = (TINY_IDS > 0).astype(np.int32)


def _write_tiny_files(directory, hidden_act="gelu"):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"w{i}" for i in range(30)]
    (directory / "vocab.txt").write_text("\n".join(tokens) + "\n")
    bert_config = dict(vocab_size=TINY["vocab_size"], hidden_size=TINY["hidden_size"],
                       num_hidden_layers=TINY["num_layers"],
                       num_attention_heads=TINY["num_attention_heads"],
                       intermediate_size=TINY["intermediate_size"],
                       max_position_embeddings=TINY["max_sequence_length"],
                       type_vocab_size=TINY["type_vocab_size"], hidden_act=hidden_act,
                       hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                       initializer_range=0.02)
    (directory / "bert_config.json").write_text(json.dumps(bert_config))


def _tiny_functional_encoder():
    # tf-models' BertEncoder defaults to the tanh GELU, as Google's BERT does.
    return networks.BertEncoder(
        vocab_size=TINY["vocab_size"], hidden_size=TINY["hidden_size"],
        num_layers=TINY["num_layers"], num_attention_heads=TINY["num_attention_heads"],
        inner_dim=TINY["intermediate_size"], max_sequence_length=TINY["max_sequence_length"],
        type_vocab_size=TINY["type_vocab_size"], dict_outputs=True)


def _tiny_v2_encoder():
    return encoders.build_encoder(encoders.EncoderConfig(**TINY, activation="gelu_approximate"))


def _randomize(encoder):
    rng = np.random.default_rng(1)
    for variable in encoder.variables:
        variable.assign(rng.normal(0, 0.3, variable.shape).astype(np.float32))


@pytest.mark.parametrize("layout", ["BertEncoder", "BertEncoderV2"])
@pytest.mark.parametrize("root", ["encoder", "model"])
def test_tf2_checkpoint_round_trip(tmp_path, layout, root):
    source = _tiny_functional_encoder() if layout == "BertEncoder" else _tiny_v2_encoder()
    _randomize(source)
    tf.train.Checkpoint(**{root: source}).write(str(tmp_path / "bert_model.ckpt"))
    _write_tiny_files(tmp_path)
    loaded = encoders.load_pretrained_encoder(str(tmp_path))
    assert loaded.source == "tf2-checkpoint"
    assert loaded.config.activation == "gelu_approximate"
    np.testing.assert_allclose(_encode(loaded.encoder, TINY_IDS, TINY_MASK),
                               _encode(source, TINY_IDS, TINY_MASK), atol=1e-6)


def _save_raw_checkpoint(prefix, tensors):
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(tensors[n]) for n in names])


def test_tf2_legacy_checkpoint_layout(tmp_path):
    """The first TF2 BERT checkpoints: model/layer_with_weights-N, _attention_output_dense."""
    source = _tiny_functional_encoder()
    _randomize(source)
    written = tf.train.Checkpoint(encoder=source).write(str(tmp_path / "tmp" / "ckpt"))
    reader = tf.train.load_checkpoint(written)
    tensors = {}
    for key in reader.get_variable_to_shape_map():
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        value = reader.get_tensor(key)
        key = key.replace("encoder/", "model/", 1).replace(
            "/_attention_layer/_output_dense/", "/_attention_output_dense/")
        tensors[key] = value
        # Optimizer slots that must be ignored.
        tensors[key.replace("/.ATTRIBUTES/", "/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/")] = (
            np.full_like(value, 7.0))
    tensors["save_counter/.ATTRIBUTES/VARIABLE_VALUE"] = np.int64(1)
    _save_raw_checkpoint(str(tmp_path / "bert_model.ckpt"), tensors)
    _write_tiny_files(tmp_path)
    loaded = encoders.load_pretrained_encoder(str(tmp_path / "bert_model.ckpt"))
    np.testing.assert_allclose(_encode(loaded.encoder, TINY_IDS, TINY_MASK),
                               _encode(source, TINY_IDS, TINY_MASK), atol=1e-6)


def test_tf1_google_checkpoint(tmp_path):
    source = _tiny_v2_encoder()
    _randomize(source)
    hidden = TINY["hidden_size"]
    # pylint: disable=protected-access
    tensors = {
        "bert/embeddings/word_embeddings": source._embedding_layer.embeddings,
        "bert/embeddings/position_embeddings":
            source._position_embedding_layer._position_embeddings,
        "bert/embeddings/token_type_embeddings": source._type_embedding_layer.embeddings,
        "bert/embeddings/LayerNorm/gamma": source._embedding_norm_layer.gamma,
        "bert/embeddings/LayerNorm/beta": source._embedding_norm_layer.beta,
        "bert/pooler/dense/kernel": source._pooler_layer.kernel,
        "bert/pooler/dense/bias": source._pooler_layer.bias,
    }
    for i, block in enumerate(source.transformer_layers):
        p = f"bert/encoder/layer_{i}/"
        attention = block._attention_layer
        for name, layer in (("query", attention._query_dense), ("key", attention._key_dense),
                            ("value", attention._value_dense)):
            tensors[p + f"attention/self/{name}/kernel"] = tf.reshape(layer.kernel,
                                                                      [hidden, hidden])
            tensors[p + f"attention/self/{name}/bias"] = tf.reshape(layer.bias, [hidden])
        tensors[p + "attention/output/dense/kernel"] = tf.reshape(
            attention._output_dense.kernel, [hidden, hidden])
        tensors[p + "attention/output/dense/bias"] = attention._output_dense.bias
        for tf1_name, layer in (("attention/output/LayerNorm", block._attention_layer_norm),
                                ("output/LayerNorm", block._output_layer_norm)):
            tensors[p + tf1_name + "/gamma"] = layer.gamma
            tensors[p + tf1_name + "/beta"] = layer.beta
        for tf1_name, layer in (("intermediate/dense", block._intermediate_dense),
                                ("output/dense", block._output_dense)):
            tensors[p + tf1_name + "/kernel"] = layer.kernel
            tensors[p + tf1_name + "/bias"] = layer.bias
    # pylint: enable=protected-access
    tensors = {name: np.asarray(value) for name, value in tensors.items()}
    tensors["bert/embeddings/word_embeddings/adam_m"] = np.zeros([40, 16], np.float32)
    tensors["cls/predictions/output_bias"] = np.zeros([40], np.float32)
    tensors["global_step"] = np.int64(3)
    _save_raw_checkpoint(str(tmp_path / "bert_model.ckpt"), tensors)
    _write_tiny_files(tmp_path)
    loaded = encoders.load_pretrained_encoder(str(tmp_path))
    assert loaded.source == "tf1-checkpoint"
    np.testing.assert_allclose(_encode(loaded.encoder, TINY_IDS, TINY_MASK),
                               _encode(source, TINY_IDS, TINY_MASK), atol=1e-6)


def test_tf2_checkpoint_config_mismatch(tmp_path):
    source = _tiny_v2_encoder()
    tf.train.Checkpoint(encoder=source).write(str(tmp_path / "bert_model.ckpt"))
    _write_tiny_files(tmp_path)
    config = json.loads((tmp_path / "bert_config.json").read_text())
    config["vocab_size"] = 50
    (tmp_path / "bert_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="word_embeddings"):
        encoders.load_pretrained_encoder(str(tmp_path))


def test_own_config_and_checkpoint(tmp_path):
    config = encoders.EncoderConfig(**TINY, activation="gelu", do_lower_case=False)
    source = encoders.build_encoder(config)
    _randomize(source)
    tf.train.Checkpoint(encoder=source).write(str(tmp_path / "ckpt"))
    config.save(str(tmp_path / encoders.ENCODER_CONFIG_FILE))
    _write_tiny_files(tmp_path)  # its bert_config.json is ignored: ours comes first
    loaded = encoders.load_pretrained_encoder(str(tmp_path))
    assert loaded.config == config
    np.testing.assert_allclose(_encode(loaded.encoder, TINY_IDS, TINY_MASK),
                               _encode(source, TINY_IDS, TINY_MASK), atol=1e-6)


def test_config_serialization():
    config = encoders.EncoderConfig(**TINY, activation="gelu_approximate", norm_epsilon=1e-6)
    assert encoders.EncoderConfig.from_json(config.to_json()) == config
    assert encoders.EncoderConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="bogus"):
        encoders.EncoderConfig.from_dict(dict(config.to_dict(), bogus=1))
    with pytest.raises(ValueError, match="activation"):
        encoders.EncoderConfig(**TINY, activation="swish")
    with pytest.raises(ValueError, match="divisible"):
        encoders.EncoderConfig(**dict(TINY, num_attention_heads=5))


def test_config_from_hf_and_google():
    hf = dict(model_type="bert", vocab_size=100, hidden_size=64, num_hidden_layers=3,
              num_attention_heads=4, intermediate_size=128, max_position_embeddings=256,
              type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-7,
              hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3)
    config = encoders.EncoderConfig.from_hf_config(hf, do_lower_case=False)
    assert (config.num_layers, config.max_sequence_length, config.norm_epsilon) == (3, 256, 1e-7)
    assert config.activation == "gelu" and not config.do_lower_case
    assert (config.hidden_dropout_rate, config.attention_dropout_rate) == (0.2, 0.3)
    assert encoders.EncoderConfig.from_hf_config(
        dict(hf, hidden_act="gelu_new")).activation == "gelu_approximate"
    google = {k: v for k, v in hf.items() if k not in ("model_type", "layer_norm_eps")}
    assert encoders.EncoderConfig.from_bert_config(google).activation == "gelu_approximate"
    with pytest.raises(ValueError, match="model_type"):
        encoders.EncoderConfig.from_hf_config(dict(hf, model_type="roberta"))


def test_activation_is_exact_or_approximate():
    x = tf.constant([-2.0, -0.5, 0.7, 1.5])
    exact = 0.5 * x * (1.0 + tf.math.erf(x / np.sqrt(2.0)))
    tanh = 0.5 * x * (1.0 + tf.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))
    for activation, expected in (("gelu", exact), ("gelu_approximate", tanh)):
        encoder = encoders.build_encoder(encoders.EncoderConfig(**TINY, activation=activation))
        for block in encoder.transformer_layers:
            # pylint: disable=protected-access
            got = block._intermediate_activation_layer(x)
            np.testing.assert_allclose(got, expected, atol=1e-6)
    assert np.max(np.abs(exact.numpy() - tanh.numpy())) > 1e-4


def test_norm_epsilon_is_applied():
    encoder = encoders.build_encoder(encoders.EncoderConfig(**TINY, norm_epsilon=1e-3))
    # pylint: disable=protected-access
    assert encoder._embedding_norm_layer.epsilon == 1e-3
    assert all(block._attention_layer_norm.epsilon == 1e-3
               and block._output_layer_norm.epsilon == 1e-3
               for block in encoder.transformer_layers)


def test_encoder_from_config_forms(tmp_path):
    config = encoders.EncoderConfig(**TINY)
    path = str(tmp_path / "encoder_config.json")
    config.save(path)
    for form in (config, config.to_dict(), config.to_json(), path):
        encoder = encoders.encoder_from_config(form)
        assert isinstance(encoder, networks.BertEncoderV2)
        assert encoder.get_config()["num_layers"] == TINY["num_layers"]


def test_encoder_saved_model_round_trip(tmp_path):
    encoder = _tiny_v2_encoder()
    _randomize(encoder)

    class Module(tf.Module):
        def __init__(self):
            super().__init__()
            self.encoder = encoder

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)] * 2)
        def encode(self, ids, mask):
            return self.encoder(dict(input_word_ids=ids, input_mask=mask,
                                     input_type_ids=tf.zeros_like(ids)))["sequence_output"]

    tf.saved_model.save(Module(), str(tmp_path / "saved"))
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    ids, mask = tf.constant(TINY_IDS, tf.int32), tf.constant(TINY_MASK, tf.int32)
    np.testing.assert_allclose(restored.encode(ids, mask).numpy(),
                               _encode(encoder, TINY_IDS, TINY_MASK), atol=1e-6)


# ------------------------------------------------------------------------------------------
# Small HuggingFace-format directories.


def _tiny_hf_weights(seed=0):
    """Random weights for TINY in HF BertModel names and layouts ([out, in] kernels)."""
    rng = np.random.default_rng(seed)
    hidden, inner = TINY["hidden_size"], TINY["intermediate_size"]

    def normal(*shape):
        return rng.normal(0, 0.3, shape).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": normal(TINY["vocab_size"], hidden),
        "embeddings.position_embeddings.weight": normal(TINY["max_sequence_length"], hidden),
        "embeddings.token_type_embeddings.weight": normal(TINY["type_vocab_size"], hidden),
        "embeddings.LayerNorm.weight": 1 + normal(hidden),
        "embeddings.LayerNorm.bias": normal(hidden),
        "embeddings.position_ids": np.arange(TINY["max_sequence_length"])[None],
        "pooler.dense.weight": normal(hidden, hidden),
        "pooler.dense.bias": normal(hidden),
    }
    for i in range(TINY["num_layers"]):
        p = f"encoder.layer.{i}."
        for name, (out_size, in_size) in {
                "attention.self.query": (hidden, hidden), "attention.self.key": (hidden, hidden),
                "attention.self.value": (hidden, hidden),
                "attention.output.dense": (hidden, hidden),
                "intermediate.dense": (inner, hidden), "output.dense": (hidden, inner)}.items():
            weights[p + name + ".weight"] = normal(out_size, in_size)
            weights[p + name + ".bias"] = normal(out_size)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[p + name + ".weight"] = 1 + normal(hidden)
            weights[p + name + ".bias"] = normal(hidden)
    return weights


def _write_tiny_hf_dir(directory, weights=None, skip=(), **config_changes):
    weights = _tiny_hf_weights() if weights is None else weights
    config = dict(model_type="bert", vocab_size=TINY["vocab_size"],
                  hidden_size=TINY["hidden_size"], num_hidden_layers=TINY["num_layers"],
                  num_attention_heads=TINY["num_attention_heads"],
                  intermediate_size=TINY["intermediate_size"],
                  max_position_embeddings=TINY["max_sequence_length"],
                  type_vocab_size=TINY["type_vocab_size"], hidden_act="gelu",
                  layer_norm_eps=1e-12)
    config.update(config_changes)
    _write_tiny_files(directory)
    (directory / "bert_config.json").unlink()
    if "config.json" not in skip:
        (directory / "config.json").write_text(json.dumps(config))
    if "model.safetensors" not in skip:
        save_file(weights, str(directory / "model.safetensors"))
    if "vocab.txt" in skip:
        (directory / "vocab.txt").unlink()
    return weights


def test_tiny_hf_directory_matches_numpy_forward(tmp_path):
    weights = _write_tiny_hf_dir(tmp_path)
    loaded = encoders.load_pretrained_encoder(str(tmp_path))
    assert loaded.config.activation == "gelu"
    expected = _numpy_bert(weights, loaded.config, TINY_IDS, TINY_MASK)
    np.testing.assert_allclose(_encode(loaded.encoder, TINY_IDS, TINY_MASK), expected,
                               atol=1e-4)


def test_hf_weights_with_bert_prefix_heads_and_old_names(tmp_path):
    plain_dir, prefixed_dir = tmp_path / "plain", tmp_path / "prefixed"
    plain_dir.mkdir()
    prefixed_dir.mkdir()
    weights = _write_tiny_hf_dir(plain_dir)
    prefixed = {"bert." + name.replace("LayerNorm.weight", "LayerNorm.gamma")
                .replace("LayerNorm.bias", "LayerNorm.beta"): value
                for name, value in weights.items()}
    prefixed["cls.predictions.bias"] = np.zeros([TINY["vocab_size"]], np.float32)
    prefixed["cls.predictions.transform.dense.weight"] = np.zeros([16, 16], np.float32)
    _write_tiny_hf_dir(prefixed_dir, weights=prefixed)
    plain = encoders.load_pretrained_encoder(str(plain_dir)).encoder
    from_prefixed = encoders.load_pretrained_encoder(str(prefixed_dir)).encoder
    assert len(plain.variables) == len(from_prefixed.variables)
    for a, b in zip(plain.variables, from_prefixed.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "vocab.txt"])
def test_missing_file_is_named(tmp_path, missing):
    _write_tiny_hf_dir(tmp_path, skip=(missing,))
    with pytest.raises(FileNotFoundError) as error:
        encoders.load_pretrained_encoder(str(tmp_path))
    message = str(error.value)
    assert missing in message and "\n" not in message


def test_missing_directory():
    with pytest.raises(FileNotFoundError, match="not found"):
        encoders.load_pretrained_encoder("/nonexistent/encoder")


def test_shape_mismatch_names_the_weight(tmp_path):
    _write_tiny_hf_dir(tmp_path, intermediate_size=24)
    with pytest.raises(ValueError, match=r"encoder\.layer\.0\.intermediate\.dense\.weight"):
        encoders.load_pretrained_encoder(str(tmp_path))


def test_missing_weight_is_named(tmp_path):
    weights = _tiny_hf_weights()
    del weights["encoder.layer.1.output.dense.bias"]
    _write_tiny_hf_dir(tmp_path, weights=weights)
    with pytest.raises(ValueError, match=r"encoder\.layer\.1\.output\.dense\.bias"):
        encoders.load_pretrained_encoder(str(tmp_path))


def test_layer_count_mismatch(tmp_path):
    _write_tiny_hf_dir(tmp_path, num_hidden_layers=3)
    with pytest.raises(ValueError, match="2 transformer layers"):
        encoders.load_pretrained_encoder(str(tmp_path))


def test_config_of_a_model_directory_from_before_mpnet_is_bert():
    # tagger_config.json written before the MPNet fields: BERT's architecture and tokens.
    old = {k: v for k, v in encoders.EncoderConfig(**TINY).to_dict().items()
           if k not in ("model_type", "relative_attention_num_buckets",
                        "relative_attention_max_distance", "cls_token", "sep_token",
                        "pad_token", "unk_token")}
    config = encoders.EncoderConfig.from_dict(old)
    assert config.model_type == "bert" and config.relative_attention_num_buckets == 0
    assert config.special_tokens == encoders.SpecialTokens()


def test_a_bert_directorys_special_tokens_map_is_read(tmp_path):
    _write_tiny_hf_dir(tmp_path)
    vocab = (tmp_path / "vocab.txt").read_text().splitlines()
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(
        {"cls_token": {"content": vocab[5]}, "pad_token": vocab[6]}))
    config = encoders.load_pretrained_encoder(str(tmp_path)).config
    assert (config.cls_token, config.pad_token) == (vocab[5], vocab[6])
    assert (config.sep_token, config.unk_token) == ("[SEP]", "[UNK]")  # unnamed: BERT's
    tokenizer = config.tokenizer(str(tmp_path / "vocab.txt"))
    assert (tokenizer.cls_id, tokenizer.pad_id) == (5, 6)


def test_unsupported_hf_config(tmp_path):
    _write_tiny_hf_dir(tmp_path, hidden_act="silu")
    with pytest.raises(ValueError, match="silu"):
        encoders.load_pretrained_encoder(str(tmp_path))


def test_vocab_casing_guess(tmp_path):
    assert encoders._vocab_is_uncased(  # pylint: disable=protected-access
        os.path.join(encoders.default_encoder_dir(), "vocab.txt"))
    cased = tmp_path / "vocab.txt"
    cased.write_text("\n".join(["[PAD]", "[UNK]", "The", "the", "Paris", "of", "New", "##s"]))
    assert not encoders._vocab_is_uncased(str(cased))  # pylint: disable=protected-access


def test_load_into_existing_encoder(tmp_path):
    _write_tiny_hf_dir(tmp_path)
    reference = encoders.load_pretrained_encoder(str(tmp_path)).encoder
    target = encoders.build_encoder(encoders.EncoderConfig(**TINY))
    loaded = encoders.load_pretrained_encoder(str(tmp_path), encoder=target)
    assert loaded.encoder is target
    for a, b in zip(reference.variables, target.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_pytorch_weights(tmp_path):
    torch = pytest.importorskip("torch")
    plain_dir, torch_dir = tmp_path / "plain", tmp_path / "torch"
    plain_dir.mkdir()
    torch_dir.mkdir()
    weights = _write_tiny_hf_dir(plain_dir)
    _write_tiny_hf_dir(torch_dir, skip=("model.safetensors",))
    torch.save({"bert." + k: torch.from_numpy(v) for k, v in weights.items()},
               str(torch_dir / "pytorch_model.bin"))
    loaded = encoders.load_pretrained_encoder(str(torch_dir))
    assert loaded.source == "hf-pytorch"
    reference = encoders.load_pretrained_encoder(str(plain_dir)).encoder
    for a, b in zip(reference.variables, loaded.encoder.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
