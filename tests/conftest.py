"""Shared test setup: legacy Keras before TensorFlow, and the NLTK treebank sample."""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

_SHARED_NLTK_DATA = os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "nltk_data"))
if "NLTK_DATA" not in os.environ and os.path.isdir(_SHARED_NLTK_DATA):
    os.environ["NLTK_DATA"] = _SHARED_NLTK_DATA

import contextlib
import itertools
import json
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Callable

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Test servers listen on ports below the kernel's ephemeral range (32768 and up on Linux),
# which bind(port 0) and outgoing connections draw from: a port found free there can be taken
# by another worker's client before the server binds it. Each xdist worker has its own block.
_FIRST_TEST_PORT = 20000
_PORTS_PER_WORKER = 1000
_port_offsets = itertools.count()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on and no earlier call returned."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    block = int(worker[2:]) if worker[2:].isdigit() else 0
    for _ in range(_PORTS_PER_WORKER):
        port = (_FIRST_TEST_PORT + block * _PORTS_PER_WORKER
                + next(_port_offsets) % _PORTS_PER_WORKER)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in worker {worker}'s block")


def nltk_sample_available() -> bool:
    from tetra_tf.trees import treebank

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

    from tetra_tf.training import encoders

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


MPNET_SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "[UNK]",
                        "sep_token": "</s>", "pad_token": "<pad>", "cls_token": "<s>"}


def write_tiny_mpnet(directory: str, hidden: int = 16, layers: int = 2, heads: int = 2,
                     positions: int = 200, buckets: int = 32, seed: int = 0) -> str:
    """Writes a random MPNet in HuggingFace's format (config.json, model.safetensors,
    vocab.txt, special_tokens_map.json, tokenizer_config.json), with NumPy.

    Its vocabulary is MiniLM's shifted by four (<s>, <pad>, </s>, <unk> first), as
    all-mpnet-base-v2's is, with <mask> last; its position table has fairseq's two
    leading rows (padding_idx 1). LayerNorm weights and biases are random too, so that a
    misplaced one shows. No dropout.
    """
    import json

    import numpy as np
    from safetensors.numpy import save_file

    from tetra_tf.training import encoders

    with open(os.path.join(encoders.default_encoder_dir(), "vocab.txt"), encoding="utf-8") as f:
        vocab = ["<s>", "<pad>", "</s>", "<unk>"] + f.read().splitlines() + ["<mask>"]
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in vocab)
    inner = 2 * hidden
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.1):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    weights = {
        "embeddings.word_embeddings.weight": normal(len(vocab), hidden),
        "embeddings.position_embeddings.weight": normal(positions + 2, hidden),
        "embeddings.position_ids": np.arange(positions + 2, dtype=np.int64)[None],
        "embeddings.LayerNorm.weight": 1.0 + normal(hidden),
        "embeddings.LayerNorm.bias": normal(hidden),
        "encoder.relative_attention_bias.weight": normal(buckets, heads, scale=1.0),
        "pooler.dense.weight": normal(hidden, hidden),
        "pooler.dense.bias": normal(hidden),
    }
    for i in range(layers):
        prefix = f"encoder.layer.{i}."
        for name, (rows, cols) in {
                "attention.attn.q": (hidden, hidden), "attention.attn.k": (hidden, hidden),
                "attention.attn.v": (hidden, hidden), "attention.attn.o": (hidden, hidden),
                "intermediate.dense": (inner, hidden), "output.dense": (hidden, inner)}.items():
            weights[prefix + name + ".weight"] = normal(rows, cols, scale=0.3)
            weights[prefix + name + ".bias"] = normal(rows)
        for name in ("attention.LayerNorm", "output.LayerNorm"):
            weights[prefix + name + ".weight"] = 1.0 + normal(hidden)
            weights[prefix + name + ".bias"] = normal(hidden)
    save_file(weights, os.path.join(directory, "model.safetensors"))
    config = {"architectures": ["MPNetForMaskedLM"], "model_type": "mpnet",
              "hidden_act": "gelu", "hidden_size": hidden, "num_hidden_layers": layers,
              "num_attention_heads": heads, "intermediate_size": inner,
              "max_position_embeddings": positions + 2, "vocab_size": len(vocab),
              "layer_norm_eps": 1e-5, "hidden_dropout_prob": 0.0,
              "attention_probs_dropout_prob": 0.0, "initializer_range": 0.02,
              "relative_attention_num_buckets": buckets, "pad_token_id": 1,
              "bos_token_id": 0, "eos_token_id": 2}
    for name, value in (("config.json", config),
                        ("special_tokens_map.json", MPNET_SPECIAL_TOKENS),
                        ("tokenizer_config.json", {"do_lower_case": True,
                                                   **MPNET_SPECIAL_TOKENS})):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            json.dump(value, f)
    return directory


def built_once(tmp_path_factory, name: str, build) -> str:
    """The directory `name`, filled by build(path) once per test run.

    Under pytest-xdist every worker process has its own session fixtures; the directory
    then lives beside the workers' temporary roots and is built by the first worker to
    ask, under a file lock (pytest-xdist's recipe for session fixtures run once).
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        path = str(tmp_path_factory.mktemp(name))
        build(path)
        return path
    import shutil

    from filelock import FileLock

    path = tmp_path_factory.getbasetemp().parent / name
    with FileLock(str(path) + ".lock"):
        if not (path / ".built").exists():
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            build(str(path))
            (path / ".built").touch()
    return str(path)


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> str:
    """A random 2-layer BERT (hidden 32, no dropout) in HuggingFace's format."""
    return built_once(tmp_path_factory, "tiny_encoder", write_tiny_bert)


@pytest.fixture(scope="session")
def tiny_mpnet_dir(tmp_path_factory) -> str:
    """A random 2-layer MPNet (hidden 16, no dropout) in HuggingFace's format."""
    return built_once(tmp_path_factory, "tiny_mpnet", write_tiny_mpnet)


def convert(input_path: str, output_dir: str, vocab_from: str | None = None) -> None:
    """Converts treebank lines to TFRecords, in this process (tools/convert_ptb.py's work;
    tests/test_convert.py runs the program itself)."""
    from tetra_tf.data import convert as convert_ptb

    convert_ptb.run(input_path=str(input_path), output_dir=str(output_dir),
                    vocab_from=vocab_from, progress=False)


def _write_small_data(root: str) -> None:
    from tetra_tf.trees import treebank

    for split, count in (("train", 96), ("dev", 24)):
        lines = []
        for entry in treebank.read_nltk_sample(split):
            if entry.tree is not None:
                lines.append(treebank.tree_to_line(treebank.clean_tree(entry.tree)))
            if len(lines) == count:
                break
        with open(os.path.join(root, f"{split}.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    train, dev = os.path.join(root, "train"), os.path.join(root, "dev")
    convert(os.path.join(root, "train.txt"), train)
    convert(os.path.join(root, "dev.txt"), dev, vocab_from=train)


@pytest.fixture(scope="session")
def small_data_dirs(tmp_path_factory) -> dict[str, str]:
    """Converted train (96 trees) and dev (24 trees) directories cut from the NLTK sample."""
    if not nltk_sample_available():
        pytest.skip("NLTK treebank sample not found (set NLTK_DATA)")
    root = built_once(tmp_path_factory, "small_data", _write_small_data)
    return {split: os.path.join(root, split) for split in ("train", "dev")}


def _tiny_export_root(tmp_path_factory) -> str:
    import tiny_model
    from tetra_tf.savedmodel import exporter as export

    def build(root):
        # A stack depth other than the default 8, so that a reader assuming 8 fails.
        tiny_model.make_model_dir(os.path.join(root, "model"), max_stack_depth=6)
        export.export(os.path.join(root, "model"), os.path.join(root, "tetra", "1"))

    return built_once(tmp_path_factory, "tiny_export", build)


@pytest.fixture(scope="session")
def tiny_export_dir(tmp_path_factory) -> str:
    """A SavedModel exported from tests/tiny_model.py's random model (shared, read-only)."""
    return os.path.join(_tiny_export_root(tmp_path_factory), "tetra", "1")


def _tiny_mpnet_export_root(tmp_path_factory) -> str:
    import tiny_model
    from tetra_tf.savedmodel import exporter as export

    def build(root):
        tiny_model.make_model_dir(os.path.join(root, "model"), max_stack_depth=6,
                                  model_type="mpnet")
        export.export(os.path.join(root, "model"), os.path.join(root, "tetra", "1"))

    return built_once(tmp_path_factory, "tiny_mpnet_export", build)


@pytest.fixture(scope="session")
def tiny_mpnet_export_dir(tmp_path_factory) -> str:
    """A SavedModel of tests/tiny_model.py's random MPNet model (shared, read-only)."""
    return os.path.join(_tiny_mpnet_export_root(tmp_path_factory), "tetra", "1")


@pytest.fixture(scope="session")
def tiny_mpnet_model_dir(tmp_path_factory) -> str:
    """The model directory `tiny_mpnet_export_dir` was exported from (shared, read-only)."""
    return os.path.join(_tiny_mpnet_export_root(tmp_path_factory), "model")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """The model directory `tiny_export_dir` was exported from (shared, read-only)."""
    return os.path.join(_tiny_export_root(tmp_path_factory), "model")


def preorder_constituents(tree) -> list[tuple[str, int, int]]:
    """(label, first word, last word) of every bracket of an nltk tree but the root's and
    the parts of speech', in the order the tree string opens them: the tests' oracle for
    the constituents a parse lists."""
    out: list = []

    def walk(node, first: int) -> int:
        if isinstance(node[0], str):  # a part of speech over its word
            return first + 1
        index = len(out)
        out.append(None)
        position = first
        for child in node:
            position = walk(child, position)
        out[index] = (node.label(), first, position - 1)
        return position

    walk(tree, 0)
    return out[1:]


def assert_spans_are_the_parsers(spans: list[dict], every, floor: float) -> None:
    """A sentence's labelled spans as Beam's records and Spark's rows hold them
    ({"label", "start", "end", "probability"} each) are the Parser's at this floor, in its
    order: every is that sentence's `ParseResult.span_marginals` at floor 0 (alone), and a
    span within float noise of the floor may be on either side of it (in a batch of other
    widths)."""
    table = {(span.label, span.start, span.end): span.probability for span in every}
    got = {(span["label"], span["start"], span["end"]): span["probability"] for span in spans}
    assert len(got) == len(spans)  # each labelled span once
    assert {key for key, p in table.items() if p >= floor + 1e-5} <= set(got) <= {
        key for key, p in table.items() if p >= floor - 1e-5}
    assert list(got) == [key for key in table if key in got]  # the Parser's order
    for key, probability in got.items():
        assert isinstance(probability, float) and isinstance(key[1], int)
        assert probability == pytest.approx(table[key], abs=1e-5), key


def parse_with_copies_of(parser, monkeypatch) -> None:
    """Until the test ends, a Parser made of `parser`'s export with no other arguments (the
    one a program, a Beam handler or a spaCy component makes) is a copy of `parser`: the
    export loaded once per module. Other exports, and Parsers made with arguments, load as
    usual; so does the program's own load wherever a test runs it as a new process."""
    import copy

    from tetra_tf import parser as parser_module

    load = parser_module.Parser

    def copy_or_load(export_dir, *args, **kwargs):
        if export_dir == parser.export_dir and not args and not kwargs:
            return copy.copy(parser)
        return load(export_dir, *args, **kwargs)

    monkeypatch.setattr(parser_module, "Parser", copy_or_load)


def subprocess_env() -> dict[str, str]:
    """The environment for the project's programs run by tests: importable, TF quiet,
    and no TF_CONFIG (which would make training join a cluster)."""
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_USE_LEGACY_KERAS="1",
               TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_CONFIG", None)
    return env


def run_module(module: str, *args: str, stdin: str | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """Runs `python -m module args` in `subprocess_env()`."""
    return subprocess.run([sys.executable, "-m", module, *args], env=subprocess_env(),
                          input=stdin, capture_output=True, text=True, timeout=timeout,
                          check=False)


@contextlib.contextmanager
def served_until_done(process: subprocess.Popen, rest_port: int, log_path: str,
                      timeout_s: float = 180, model_names: tuple[str, ...] = ("tetra",)):
    """Yields once the server `process` reports a version of each of model_names AVAILABLE
    on rest_port (failing with its log if it exits first); terminates it when the block
    ends."""
    try:
        deadline = time.monotonic() + timeout_s
        waiting = list(model_names)
        while waiting:
            assert process.poll() is None, open(log_path, encoding="utf-8").read()[-3000:]
            with contextlib.suppress(OSError, ValueError):
                status = json.load(urllib.request.urlopen(
                    f"http://127.0.0.1:{rest_port}/v1/models/{waiting[0]}", timeout=5))
                if any(version.get("state") == "AVAILABLE"
                       for version in status["model_version_status"]):
                    waiting.pop(0)
                    continue
            assert time.monotonic() < deadline, "the server did not come up"
            time.sleep(0.3)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def load_tool(name: str):
    """tools/NAME.py imported as a module (the tools are scripts, not a package)."""
    import importlib.util

    path = os.path.join(REPO_ROOT, "tools", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass of the module looks the module up there
    spec.loader.exec_module(module)
    return module


def run_cli(define_flags: Callable[[], None], main: Callable[[list[str]], int | None],
            *args: str, stdin: str | bytes = b"",
            user_errors: tuple[type[BaseException], ...] = (),
            flag_names: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A program run in this process as its `__main__` runs it (`define_flags()`, then
    `cli.run(main, user_errors, flag_names=...)`), with stdin given and stdout and stderr
    captured as text.

    For a command's work and its messages (exit codes, one-line errors) without starting
    Python and TensorFlow again; a program's start as a process is tested where it matters
    (the trained model's training, the quick start, --help in the commands reference). The
    program's flags are removed and absl's flags left unparsed afterwards.
    """
    import io

    from absl import flags

    from tetra_tf import cli

    known = set(flags.FLAGS)
    assert not flags.FLAGS.is_parsed(), "absl flags parsed before run_cli"
    data = stdin if isinstance(stdin, bytes) else stdin.encode("utf-8")
    streams = {"stdin": io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"),
               "stdout": io.TextIOWrapper(io.BytesIO(), encoding="utf-8"),
               "stderr": io.TextIOWrapper(io.BytesIO(), encoding="utf-8")}
    saved = {name: getattr(sys, name) for name in ("argv", *streams)}
    try:
        define_flags()
        sys.argv = [main.__module__, *args]
        for name, stream in streams.items():
            setattr(sys, name, stream)
        try:
            cli.run(main, user_errors=user_errors, flag_names=flag_names)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        for name, value in saved.items():
            setattr(sys, name, value)
        for name in set(flags.FLAGS) - known:
            delattr(flags.FLAGS, name)
        flags.FLAGS.unparse_flags()
    output = {}
    for name in ("stdout", "stderr"):
        streams[name].flush()
        output[name] = streams[name].buffer.getvalue().decode("utf-8")
    return subprocess.CompletedProcess([main.__module__, *args], code, output["stdout"],
                                       output["stderr"])


def run_python(code: str, timeout: float = 300) -> str:
    """Runs `python -c code` in `subprocess_env()` (a new process: TensorFlow not yet
    started); asserts it succeeds and returns its stdout, stripped."""
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(),
                            capture_output=True, text=True, timeout=timeout, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


TRAINED_RUN_EPOCHS = 3


@pytest.fixture(scope="session")
def trained_run(tiny_encoder_dir, small_data_dirs, tmp_path_factory) -> dict:
    """A tiny model trained once by the command line, scored and exported (read-only).

    `python -m tetra_tf.train` for TRAINED_RUN_EPOCHS epochs (learning rate 1e-3, dev
    scored after each), then `train --evaluate` in this process on a "test" split (the dev
    records again under a test split's name), then the export. Returns model_dir, test_dir,
    export_dir and evaluation (the --evaluate JSON).
    """
    import json
    import shutil

    from tetra_tf.savedmodel import exporter as export
    from tetra_tf.training import trainer as train

    def build(root):
        model_dir = os.path.join(root, "run")
        result = run_module(
            "tetra_tf.train", f"--train_data={small_data_dirs['train']}",
            f"--dev_data={small_data_dirs['dev']}", f"--model_dir={model_dir}",
            f"--encoder={tiny_encoder_dir}", "--batch_size=8",
            f"--epochs={TRAINED_RUN_EPOCHS}", "--warmup_steps=2", "--learning_rate=1e-3",
            "--keep=best", "--progress=false")  # --keep=best: its tests check the selection
        assert result.returncode == 0, result.stderr[-3000:]
        test_dir = os.path.join(root, "test")
        shutil.copytree(small_data_dirs["dev"], test_dir)
        result = run_cli(train.define_flags, train.main, f"--model_dir={model_dir}",
                         f"--evaluate={test_dir}")
        assert result.returncode == 0, result.stderr[-3000:]
        with open(os.path.join(root, "evaluation.json"), "w", encoding="utf-8") as f:
            f.write(result.stdout)
        export.export(model_dir, os.path.join(root, "tetra", "1"))

    root = built_once(tmp_path_factory, "trained_run", build)
    with open(os.path.join(root, "evaluation.json"), encoding="utf-8") as f:
        evaluation = json.load(f)
    return {"model_dir": os.path.join(root, "run"), "test_dir": os.path.join(root, "test"),
            "export_dir": os.path.join(root, "tetra", "1"), "evaluation": evaluation}


# The files that take longest, longest first: pytest-xdist's --dist loadfile
# --no-loadscope-reorder (`make test`) hands files to its workers in collection order, so
# starting these first keeps one long file from running alone at the end
# (longest-processing-time-first scheduling). The order is each file's own time (its tests'
# durations); keep it current when a file's cost changes much.
SLOWEST_FILES = ("test_train.py", "test_export.py", "test_docs.py", "test_serving.py",
                 "test_spark.py", "test_ways_in.py", "test_serving_page.py",
                 "test_serving_config.py",
                 "test_parse.py", "test_distillation.py", "test_warmup.py", "test_parser.py",
                 "test_constraints.py", "test_beam.py", "test_spacy_component.py",
                 "test_model_card.py", "test_evaluate_export.py", "test_decoding.py",
                 "test_chart_decoding.py", "test_cpu.py", "test_export_ops.py",
                 "test_serving_metrics.py", "test_keras_layer.py", "test_input_pipeline.py",
                 "test_runtime.py", "test_bench_seeds.py")


# Markers for `pytest -m "not slow"` (`make test-fast`), the check to run before a commit;
# `make test` runs everything. A test that starts a model server or Spark is also slow.
MARKERS = {
    "slow": "trains, starts a server, Spark or a fresh TensorFlow process, or takes seconds",
    "server": "starts a model server process (serving/server.py)",
    "spark": "runs Apache Spark (a JVM cluster)",
}

# Module and session fixtures whose tests carry these markers: they train, serve or run Spark.
MARKING_FIXTURES = {
    "trained_run": ("slow",), "taught_dev": ("slow",), "pipeline_run": ("slow",),
    "default_run": ("slow",), "fixed_batches": ("slow",), "averaged_mixed_run": ("slow",),
    "server_process": ("server",), "batching_server": ("server",),
    "monitored_server": ("server",), "ways_in_server": ("server",),
    "server": ("server",), "page_server": ("server",), "browser": ("slow",),
    "cluster": ("spark",), "spark": ("spark",),
    "job": ("spark",),
}


def pytest_configure(config):
    for name, description in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture in item.fixturenames:
            for marker in MARKING_FIXTURES.get(fixture, ()):
                item.add_marker(marker)
        if item.get_closest_marker("server") or item.get_closest_marker("spark"):
            item.add_marker("slow")

    def rank(item):
        name = os.path.basename(str(item.path))
        return SLOWEST_FILES.index(name) if name in SLOWEST_FILES else len(SLOWEST_FILES)

    items.sort(key=rank)  # stable: each file's tests keep their order
