"""A guard for the official TensorFlow Serving: an export uses only ops its stock binary has
(TensorFlow's own, and tensorflow-text's, which it links), and it loads the way TF Serving's
C++ loader loads it (the v1 loader, then Session.run on the SignatureDef's tensor names), in
a process that imported nothing but tensorflow and tensorflow_text."""

import json
import subprocess
import sys

import pytest

import tensorflow as tf

from conftest import subprocess_env
from tetra_tf.contract import export_format

# Run in a fresh process that imports tensorflow alone first: which of the export's op types
# TensorFlow's registry lacks, and which of those tensorflow-text registers.
_LIST_OPS = """
import json, sys
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

saved_model = saved_model_pb2.SavedModel()
with open(sys.argv[1], "rb") as f:
    saved_model.ParseFromString(f.read())
ops = set()
for meta_graph in saved_model.meta_graphs:
    ops.update(node.op for node in meta_graph.graph_def.node)
    for function in meta_graph.graph_def.library.function:
        ops.update(node.op for node in function.node_def)
not_core = sorted(op for op in ops if op_def_registry.get(op) is None)
import tensorflow_text  # noqa: F401
from_text = sorted(op for op in not_core if op_def_registry.get(op) is not None)
print(json.dumps({"ops": sorted(ops), "not_core": not_core, "from_text": from_text}))
"""

# TF Serving's way: the v1 loader and Session.run on the SignatureDef's tensor names.
_RUN_LIKE_TF_SERVING = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (TF Serving links its ops)

export_dir, requests = sys.argv[1], json.loads(sys.argv[2])
results = {}
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], export_dir)
    for signature_name, inputs in requests.items():
        signature = meta_graph.signature_def[signature_name]
        feed = {signature.inputs[name].name: value for name, value in inputs.items()}
        outputs = session.run({"tree": signature.outputs["tree"].name}, feed)
        # parse_text's trees are [texts, sentences]: one sentence per text here.
        results[signature_name] = [tree.decode() for tree in outputs["tree"].reshape(-1)]
print(json.dumps({"modules": sorted(m for m in sys.modules if m.startswith("tetra_tf")),
                  "results": results}))
"""

SENTENCES = ["The cat sat on the mat .", "Dogs bark ."]


def _run(code: str, *args: str) -> dict:
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                            text=True, env=subprocess_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


pytestmark = pytest.mark.slow  # fresh TensorFlow processes


def test_every_op_is_tensorflow_s_own_or_tensorflow_text_s(tiny_export_dir):
    listed = _run(_LIST_OPS, export_format.saved_model_file(tiny_export_dir))
    assert "StatefulPartitionedCall" in listed["ops"]  # functions' ops were read too
    assert listed["not_core"], "the tokenizer's ops come from tensorflow-text"
    unknown = sorted(set(listed["not_core"]) - set(listed["from_text"]))
    assert not unknown, f"ops neither in TensorFlow nor in tensorflow-text: {unknown}"


def test_export_runs_as_tf_serving_s_cpp_loader_runs_it(tiny_export_dir):
    words = [sentence.split() for sentence in SENTENCES]
    width = max(map(len, words))
    requests = {
        export_format.SERVING_SIGNATURE: {"sentences": SENTENCES},
        export_format.PARSE_WORDS_SIGNATURE: {
            "words": [w + [""] * (width - len(w)) for w in words],
            "num_words": [len(w) for w in words]},
        export_format.PARSE_TEXT_SIGNATURE: {"text": SENTENCES},
        export_format.PARSE_MARGINALS_SIGNATURE: {"sentences": SENTENCES},
        export_format.PARSE_K_BEST_SIGNATURE: {"sentences": SENTENCES},
    }
    answered = _run(_RUN_LIKE_TF_SERVING, tiny_export_dir, json.dumps(requests))
    assert answered["modules"] == []  # nothing of tetra_tf's was imported
    model = tf.saved_model.load(tiny_export_dir)
    expected = [tree.decode() for tree in model.signatures[export_format.SERVING_SIGNATURE](
        sentences=tf.constant(SENTENCES))["tree"].numpy()]
    assert all(tree.startswith("(TOP ") for tree in expected)
    assert answered["results"] == {name: expected for name in requests}
