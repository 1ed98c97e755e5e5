"""Warm-up records: every export carries TF Serving's assets.extra/tf_serving_warmup_requests,
and the project's server replays them before a version serves (tetra_tf/export.py,
tetra_tf/serving/servable.py)."""

import os
import shutil
import statistics
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from tetra_tf.contract import export_format
from tetra_tf.savedmodel import exporter as export
from tetra_tf.serving.manager import ModelManager
from tetra_tf.serving.servable import ServedModel

SENTENCE = np.array([b"Dogs bark loudly at night ."], dtype=object)  # in no warm-up record


def _records(export_dir):
    path = os.path.join(export_dir, export_format.WARMUP_FILE)
    return [prediction_log_pb2.PredictionLog.FromString(record.numpy())
            for record in tf.data.TFRecordDataset(path)]


@pytest.fixture(scope="module")
def served(tiny_export_dir):
    """The tiny export loaded as the server loads a version (not warmed up here)."""
    return ServedModel("tetra", 1, tiny_export_dir)


def test_export_writes_tf_serving_warmup_records_that_replay_through_every_signature(
        tiny_export_dir, served):
    logs = _records(tiny_export_dir)
    batches = len(export.WARMUP_SENTENCES) + 1  # each sentence alone, then all together
    # parse_constrained and parse_span_marginals: all together only.
    assert len(logs) == batches * (len(export_format.SIGNATURES) - 2) + 2
    names = [log.predict_log.request.model_spec.signature_name for log in logs]
    assert names.count(export_format.PARSE_CONSTRAINED_SIGNATURE) == 1
    assert names.count(export_format.PARSE_SPAN_MARGINALS_SIGNATURE) == 1
    assert {log.WhichOneof("log_type") for log in logs} == {"predict_log"}
    trees = {}
    for log in logs:
        request = log.predict_log.request
        signature = request.model_spec.signature_name
        inputs = {name: tf.make_ndarray(tensor) for name, tensor in request.inputs.items()}
        outputs = served.call(signature, inputs)  # the SavedModel's signature function
        if signature in (export_format.SERVING_SIGNATURE,
                         export_format.PARSE_MARGINALS_SIGNATURE,
                         export_format.PARSE_K_BEST_SIGNATURE,
                         export_format.PARSE_CONSTRAINED_SIGNATURE,
                         export_format.PARSE_SPAN_MARGINALS_SIGNATURE):
            sentences = [s.decode() for s in inputs["sentences"]]
        elif signature == export_format.PARSE_TEXT_SIGNATURE:
            sentences = [s.decode() for s in inputs["text"]]
            # Each text is one sentence, whose raw-text tokens are its words.
            assert list(outputs["num_sentences"]) == [1] * len(sentences)
            outputs = {name: value[:, 0] for name, value in outputs.items()
                       if name in ("num_words", "tree")}
        else:
            sentences = [" ".join(w.decode() for w in row[:n])
                         for row, n in zip(inputs["words"], inputs["num_words"])]
        assert list(outputs["num_words"]) == [len(s.split()) for s in sentences]
        for sentence, tree in zip(sentences, outputs["tree"]):
            assert tree.startswith(b"(TOP ")
            trees.setdefault(sentence, set()).add(tree)
    # Every sentence, through either signature, alone or in the batch: one tree.
    assert set(trees) == set(export.WARMUP_SENTENCES)
    assert all(len(variants) == 1 for variants in trees.values())
    assert max(len(s.split()) for s in trees) > 100  # the long one reaches larger buckets


@pytest.mark.slow
def test_server_replays_the_records_or_falls_back_to_one_call_per_signature(
        tiny_export_dir, served, tmp_path):
    assert served.warm_up() == len(_records(tiny_export_dir))
    bare = str(tmp_path / "1")
    shutil.copytree(tiny_export_dir, bare)
    os.remove(os.path.join(bare, export_format.WARMUP_FILE))
    assert ServedModel("tetra", 1, bare).warm_up() == len(export_format.SIGNATURES)


def _cpu_seconds(model: ServedModel) -> float:
    """The process's CPU seconds (all threads) for one call: what a cold graph costs,
    whatever else the machine runs."""
    started = time.process_time()
    model.call(export_format.SERVING_SIGNATURE, {"sentences": SENTENCE})
    return time.process_time() - started


@pytest.mark.slow
def test_first_request_after_a_hot_switch_costs_what_steady_ones_do(tiny_export_dir, served,
                                                                    tmp_path):
    base = tmp_path / "tetra"
    for version in (1, 2, 3):
        shutil.copytree(tiny_export_dir, base / str(version))
    cold = ServedModel("tetra", 3, str(base / "3"))  # loaded, never warmed up
    cold_cost = _cpu_seconds(cold)

    shutil.rmtree(base / "3")
    served.warm_up()  # version 1: the module's (its base/1 is the same export)
    manager = ModelManager(served, load=lambda version, path: ServedModel("tetra", version, path))
    manager.poll(str(base))  # loads version 2, replays its warm-up records, switches
    with manager.acquire("tetra", None) as model:
        assert model.version == 2
        first_cost = _cpu_seconds(model)
        steady_cost = statistics.median(_cpu_seconds(model) for _ in range(5))
    assert cold_cost > 3 * steady_cost, (cold_cost, steady_cost)  # a cold graph is costly
    assert first_cost - steady_cost < 0.25 * (cold_cost - steady_cost), (
        first_cost, steady_cost, cold_cost)
