"""Shared test setup: legacy Keras before TensorFlow, and the NLTK treebank sample."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

_SHARED_NLTK_DATA = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "nltk_data"))
if "NLTK_DATA" not in os.environ and os.path.isdir(_SHARED_NLTK_DATA):
    os.environ["NLTK_DATA"] = _SHARED_NLTK_DATA

import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def nltk_sample_available() -> bool:
    from tetra_tf import treebank

    try:
        treebank.find_nltk_sample()
    except LookupError:
        return False
    return True


requires_nltk_sample = pytest.mark.skipif(
    not nltk_sample_available(), reason="NLTK treebank sample not found (set NLTK_DATA)")


def write_tiny_bert(directory: str, hidden: int = 32, layers: int = 2, heads: int = 2,
                    seed: int = 0) -> str:
    """Writes a random BERT in HuggingFace's format (config.json, model.safetensors, vocab.txt).

    Written with NumPy: importing torch after TensorFlow crashes this process. No dropout,
    so that training steps are deterministic. The vocabulary is MiniLM's.
    """
    import json
    import shutil

    import numpy as np
    from safetensors.numpy import save_file

    from tetra_tf import encoders

    vocab_path = os.path.join(encoders.default_encoder_dir(), "vocab.txt")
    with open(vocab_path, encoding="utf-8") as f:
        vocab_size = sum(1 for _ in f)
    inner, positions = 2 * hidden, 512
    rng = np.random.default_rng(seed)

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": normal(vocab_size, hidden),
        "embeddings.position_embeddings.weight": normal(positions, hidden),
        "embeddings.token_type_embeddings.weight": normal(2, hidden),
        "embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
    }
    for i in range(layers):
        prefix = f"encoder.layer.{i}."
        for name, (rows, cols) in {
                "attention.self.query": (hidden, hidden), "attention.self.key": (hidden, hidden),
                "attention.self.value": (hidden, hidden),
                "attention.output.dense": (hidden, hidden),
                "intermediate.dense": (inner, hidden), "output.dense": (hidden, inner)}.items():
            weights[prefix + name + ".weight"] = normal(rows, cols)
            weights[prefix + name + ".bias"] = normal(rows)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[prefix + name + ".weight"] = np.ones(hidden, np.float32)
            weights[prefix + name + ".bias"] = np.zeros(hidden, np.float32)
    save_file(weights, os.path.join(directory, "model.safetensors"))
    config = {"architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
              "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "intermediate_size": inner, "max_position_embeddings": positions,
              "type_vocab_size": 2, "vocab_size": vocab_size, "layer_norm_eps": 1e-12,
              "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
              "initializer_range": 0.02}
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    shutil.copyfile(vocab_path, os.path.join(directory, "vocab.txt"))
    return directory


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> str:
    """A random 2-layer BERT (hidden 32, no dropout) in HuggingFace's format."""
    return write_tiny_bert(str(tmp_path_factory.mktemp("tiny_encoder")))


def convert(args: list[str]) -> None:
    """Runs tools/convert_ptb.py, failing the test on a non-zero exit."""
    result = subprocess.run([sys.executable, os.path.join(REPO_ROOT, "tools", "convert_ptb.py")]
                            + args, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="session")
def small_data_dirs(tmp_path_factory) -> dict[str, str]:
    """Converted train (96 trees) and dev (24 trees) directories cut from the NLTK sample."""
    from tetra_tf import treebank

    if not nltk_sample_available():
        pytest.skip("NLTK treebank sample not found (set NLTK_DATA)")
    root = tmp_path_factory.mktemp("small_data")
    dirs = {}
    for split, count in (("train", 96), ("dev", 24)):
        lines = []
        for entry in treebank.read_nltk_sample(split):
            if entry.tree is not None:
                lines.append(treebank.tree_to_line(treebank.clean_tree(entry.tree)))
            if len(lines) == count:
                break
        source = root / f"{split}.txt"
        source.write_text("\n".join(lines) + "\n")
        dirs[split] = str(root / split)
    convert([f"--input={root / 'train.txt'}", f"--output_dir={dirs['train']}"])
    convert([f"--input={root / 'dev.txt'}", f"--output_dir={dirs['dev']}",
             f"--vocab_from={dirs['train']}"])
    return dirs


@pytest.fixture(scope="session")
def tiny_export_dir(tmp_path_factory) -> str:
    """A SavedModel exported from tests/tiny_model.py's random model (shared, read-only)."""
    import tiny_model
    from tetra_tf import export

    root = tmp_path_factory.mktemp("tiny_export")
    tiny_model.make_model_dir(str(root / "model"))
    export.export(str(root / "model"), str(root / "tetra" / "1"))
    return str(root / "tetra" / "1")
