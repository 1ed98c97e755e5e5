"""TF Serving's monitoring in this server: --monitoring_config_file, and TF Serving's own
metric names and labels (:tensorflow:serving:request_count, request_latency, runtime_latency,
TensorFlow's SavedModel load counters) beside the tetra_serving_* extras.

The server runs as test_serving.py runs it (serving/server.py in a subprocess, the toy
model); the exposition format and the config file are also tested without a server. Tests
assert counts, names and labels, never times.
"""

import subprocess
import sys

import pytest

for _module in ("waitress", "grpc", "tensorflow_serving", "prometheus_client"):
    pytest.importorskip(_module, reason="needs the 'serving' extra")

import tensorflow as tf  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from conftest import free_port, subprocess_env  # noqa: E402
from test_serving import (MODEL_NAME, REPO_ROOT, SERVER_SCRIPT, HTTP_TIMEOUT_S,  # noqa: E402
                          ToyParser, _grpc_code, _http, _running_server)
from tetra_tf.errors import InputError  # noqa: E402
from tetra_tf.serving import metrics  # noqa: E402

METRICS_PATH = "/monitoring/tf"  # Not TF Serving's default: the config's path is used.
VERSION = 2


def _scrape(port, path=METRICS_PATH):
    """(HTTP status, {sample with labels: value}, text) of the metrics page."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        text = response.read().decode("utf-8")
    finally:
        connection.close()
    values = {}
    if response.status == 200:
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
    return response.status, values, text


@pytest.fixture(scope="module")
def monitored_server(tmp_path_factory):
    """The toy model's server with a monitoring config: yields (REST port, gRPC port, export
    directory)."""
    root = tmp_path_factory.mktemp("monitored")
    module = ToyParser()
    export_dir = root / MODEL_NAME / str(VERSION)
    tf.saved_model.save(module, str(export_dir),
                        signatures={"serving_default": module.parse, "label": module.label})
    config = root / "monitoring.config"
    config.write_text(f'prometheus_config {{\n  enable: true\n  path: "{METRICS_PATH}"\n}}\n')
    grpc_port = free_port()
    with _running_server(root / MODEL_NAME, MODEL_NAME, root / "server.log",
                         f"--monitoring_config_file={config}",
                         "--file_system_poll_wait_seconds=0", grpc_port=grpc_port) as port:
        yield port, grpc_port, str(export_dir)


def _count(name, **labels):
    """A sample's key as _scrape gives it: name{label="value",...} in the given order."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def test_tf_serving_metric_names_labels_and_counts(monitored_server):
    import grpc
    from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2,
                                         predict_pb2, prediction_service_pb2_grpc)

    port, grpc_port, export_dir = monitored_server
    status, before, _ = _scrape(port)
    assert status == 200
    predict = f"/v1/models/{MODEL_NAME}:predict"
    assert _http(port, "POST", predict, {"instances": ["a b", "c"]})[0] == 200
    assert _http(port, "POST", predict, {"instances": ["d e f"]})[0] == 200
    assert _http(port, "POST", predict, {"instances": [3]})[0] == 400
    assert _http(port, "POST", f"/v1/models/{MODEL_NAME}:classify",
                 {"examples": [{"sentences": "a"}]})[0] == 400
    assert _http(port, "POST", f"/v1/models/{MODEL_NAME}:regress",
                 {"examples": [{"sentences": "a"}]})[0] == 400
    assert _http(port, "GET", f"/v1/models/{MODEL_NAME}/metadata")[0] == 200
    assert _http(port, "GET", f"/v1/models/{MODEL_NAME}")[0] == 200
    assert _http(port, "GET", "/v1/models/nope")[0] == 404
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = MODEL_NAME
        request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(["g h"]))
        stub.Predict(request, HTTP_TIMEOUT_S)
        classify = classification_pb2.ClassificationRequest()
        classify.model_spec.name = MODEL_NAME
        assert _grpc_code(stub.Classify, classify)[0] == grpc.StatusCode.INVALID_ARGUMENT
        metadata = get_model_metadata_pb2.GetModelMetadataRequest(
            metadata_field=["signature_def"])
        metadata.model_spec.name = MODEL_NAME
        stub.GetModelMetadata(metadata, HTTP_TIMEOUT_S)
    status, after, text = _scrape(port)
    assert status == 200

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    count = ":tensorflow:serving:request_count"
    # OK: REST predict ×2, metadata, status; gRPC Predict, GetModelMetadata.
    assert delta(_count(count, model_name=MODEL_NAME, status="OK")) == 6
    # REST predict, classify, regress; gRPC Classify.
    assert delta(_count(count, model_name=MODEL_NAME, status="INVALID_ARGUMENT")) == 4
    assert delta(_count(count, model_name="nope", status="NOT_FOUND")) == 1
    latency = ":tensorflow:serving:request_latency_count"
    timed = {(api, entrypoint): delta(_count(latency, model_name=MODEL_NAME, API=api,
                                              entrypoint=entrypoint))
             for api, entrypoint in [("predict", "REST"), ("metadata", "REST"),
                                     ("status", "REST"), ("Predict", "GRPC"),
                                     ("GetModelMetadata", "GRPC")]}
    assert timed == {("predict", "REST"): 2, ("metadata", "REST"): 1, ("status", "REST"): 1,
                     ("Predict", "GRPC"): 1, ("GetModelMetadata", "GRPC"): 1}
    # Only successes are timed, as TF Serving does: no classify, regress or Classify series.
    assert not [key for key in after if key.startswith(":tensorflow:serving:request_latency")
                and ("classify" in key.lower() or "regress" in key.lower())]
    # One model call per successful predict (no batching).
    assert delta(_count(":tensorflow:serving:runtime_latency_count", model_name=MODEL_NAME,
                        API="Predict", runtime="TF1")) == 3
    # Each method is its own label in the extras too: classify is not counted as predict.
    extras = "tetra_serving_requests_total"
    for api, method, code, expected in [
            ("rest", "predict", "OK", 2), ("rest", "predict", "INVALID_ARGUMENT", 1),
            ("rest", "classify", "INVALID_ARGUMENT", 1), ("rest", "regress", "INVALID_ARGUMENT", 1),
            ("rest", "metadata", "OK", 1), ("grpc", "classify", "INVALID_ARGUMENT", 1),
            ("grpc", "metadata", "OK", 1)]:
        assert delta(_count(extras, api=api, method=method, status=code)) == expected, method
    # The model's load, as TensorFlow's loader counts it for TF Serving.
    load = _count(":tensorflow:cc:saved_model:load_attempt_count", model_path=export_dir,
                  status="success")
    assert after[load] == 1
    assert _count(":tensorflow:cc:saved_model:load_latency", model_path=export_dir) in after
    # TF Serving's exporter's text: typed families, counters without _total, 33 buckets of
    # TF's Exponential(10, 1.8, 33) then +Inf, in microseconds.
    lines = text.splitlines()
    assert "# TYPE :tensorflow:serving:request_count counter" in lines
    assert "# TYPE :tensorflow:serving:request_latency histogram" in lines
    buckets = [line for line in lines if line.startswith(
        ':tensorflow:serving:runtime_latency_bucket{model_name="toy",API="Predict",'
        'runtime="TF1",')]
    assert len(buckets) == 34
    assert 'le="10"}' in buckets[0] and 'le="18"}' in buckets[1] and 'le="+Inf"}' in buckets[-1]
    # Prometheus's own parser (as bench/serving_load.py uses it) reads the page.
    families = {family.name for family in text_string_to_metric_families(text)}
    assert {":tensorflow:serving:request_count", ":tensorflow:serving:request_latency",
            ":tensorflow:serving:runtime_latency", "tetra_serving_batch_size"} <= families


def test_metrics_are_only_at_the_configured_path(monitored_server):
    port = monitored_server[0]
    assert _scrape(port, metrics.DEFAULT_METRICS_PATH)[0] == 404
    assert _scrape(port)[0] == 200
    status, body = _http(port, "POST", METRICS_PATH, {})
    assert status == 400 and body == {"error": f"Malformed request: POST {METRICS_PATH}"}


def test_grpc_classify_regress_and_multi_inference_answer_as_tf_serving(monitored_server):
    """TF Serving's checks, in its order, for a model whose signatures are predict ones."""
    import grpc
    from tensorflow_serving.apis import (classification_pb2, inference_pb2,
                                         prediction_service_pb2_grpc, regression_pb2)

    invalid, not_found = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    spec = {"name": MODEL_NAME}
    predict_task = {"model_spec": spec, "method_name": "tensorflow/serving/predict"}
    cases = [
        ("Classify", classification_pb2.ClassificationRequest(), invalid, "Missing ModelSpec"),
        ("Classify", classification_pb2.ClassificationRequest(model_spec={"name": "nope"}),
         not_found, "Servable not found for request: Latest(nope)"),
        ("Classify", classification_pb2.ClassificationRequest(model_spec=spec), invalid,
         "Expected classification signature method_name to be tensorflow/serving/classify. "
         "Was: tensorflow/serving/predict"),
        ("Regress", regression_pb2.RegressionRequest(model_spec=dict(
            spec, signature_name="label")), invalid,
         "Expected regression signature method_name to be tensorflow/serving/regress. "
         "Was: tensorflow/serving/predict"),
        ("Regress", regression_pb2.RegressionRequest(model_spec=dict(
            spec, signature_name="nope")), invalid, "No signature was found with the name: nope"),
        ("MultiInference", inference_pb2.MultiInferenceRequest(tasks=[predict_task]),
         grpc.StatusCode.UNIMPLEMENTED,
         "Unimplemented: Unsupported signature method_name: tensorflow/serving/predict"),
        ("MultiInference", inference_pb2.MultiInferenceRequest(tasks=[dict(
            predict_task, method_name="tensorflow/serving/classify")]), invalid,
         "Expected classification signature method_name to be tensorflow/serving/classify. "
         "Was: tensorflow/serving/predict"),
        # The first task is refused first, as in TF Serving.
        ("MultiInference", inference_pb2.MultiInferenceRequest(tasks=[
            predict_task, dict(predict_task, model_spec={"name": "other"})]),
         grpc.StatusCode.UNIMPLEMENTED,
         "Unimplemented: Unsupported signature method_name: tensorflow/serving/predict"),
        ("MultiInference", inference_pb2.MultiInferenceRequest(), not_found,
         "Servable not found for request: Latest()"),
    ]
    with grpc.insecure_channel(f"127.0.0.1:{monitored_server[1]}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        answers = [_grpc_code(getattr(stub, method), request)
                   for method, request, _, _ in cases]
    assert answers == [(code, message) for _, _, code, message in cases]


def test_grpc_error_messages_are_cut_as_tf_serving_cuts_them():
    from tetra_tf.serving import grpc_api

    assert grpc_api._truncated("x" * 1024) == "x" * 1024
    assert grpc_api._truncated("x" * 1025) == "x" * 1024 + "...TRUNCATED"


def test_bad_monitoring_config_is_one_line_usage_error(tmp_path):
    config = tmp_path / "monitoring.config"
    config.write_text("prometheus_config { enable: maybe }\n")
    (tmp_path / "base" / "1").mkdir(parents=True)
    (tmp_path / "base" / "1" / "saved_model.pb").write_bytes(b"")  # Never loaded.
    result = subprocess.run(
        [sys.executable, SERVER_SCRIPT, f"--model_base_path={tmp_path / 'base'}",
         f"--rest_api_port={free_port()}", f"--port={free_port()}",
         f"--monitoring_config_file={config}"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        env=subprocess_env())
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: --monitoring_config_file: {config}: 1:29"), lines
    assert lines[0].endswith('Expected "true" or "false".')


@pytest.mark.parametrize("text, expected", [
    ('prometheus_config { enable: true path: "/metrics" }', "/metrics"),
    ("prometheus_config { enable: true }", metrics.DEFAULT_METRICS_PATH),
    ('prometheus_config { enable: false path: "/metrics" }', None),
    ("", None),  # TF Serving's default MonitoringConfig: no metrics.
])
def test_monitoring_config_gives_the_metrics_path(tmp_path, text, expected):
    path = tmp_path / "monitoring.config"
    path.write_text(text)
    assert metrics.read_monitoring_config(str(path)) == expected


@pytest.mark.parametrize("content, message", [
    (b"prometheus_config { enable: true port: 1 }", "port"),
    (b'prometheus_config { enable: true path: "metrics" }', "must start with /"),
    (b'prometheus_config { enable: true path: "/v1/models" }', "/v1/"),
    (b"# caf\xe9\n", "not UTF-8 text (byte 6)"),
    (None, "cannot read"),
])
def test_bad_monitoring_config_says_why(tmp_path, content, message):
    path = tmp_path / "monitoring.config"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        metrics.read_monitoring_config(str(path))


def test_the_repositorys_monitoring_config_enables_tf_servings_path():
    import os

    path = os.path.join(REPO_ROOT, "serving", "monitoring.config")
    assert metrics.read_monitoring_config(path) == metrics.DEFAULT_METRICS_PATH


def test_exposition_is_tf_servings_exporters_text():
    tf_metrics = metrics.TfServingMetrics()
    assert tf_metrics.exposition() == ""  # No samples, no families (as TF Serving).
    tf_metrics.request('a"b\\c\nd', "OK", "predict", "REST", 0.000010)  # 10 µs
    tf_metrics.request("m", "NOT_FOUND", "predict", "REST", 1.0)  # counted, not timed
    lines = tf_metrics.exposition().splitlines()
    assert ':tensorflow:serving:request_count{model_name="a\\"b\\\\c\\nd",status="OK"} 1' \
        in lines
    assert ':tensorflow:serving:request_count{model_name="m",status="NOT_FOUND"} 1' in lines
    buckets = [line for line in lines if "_bucket{" in line]
    # TensorFlow's histograms put a value equal to a bucket's limit in the next bucket.
    assert buckets[0].endswith('le="10"} 0') and buckets[1].endswith('le="18"} 1')
    assert buckets[-1].endswith('le="+Inf"} 1') and len(buckets) == 34
    assert 'model_name="m"' not in "".join(buckets)
    assert metrics.prometheus_name("/tensorflow/serving/request_count") == \
        ":tensorflow:serving:request_count"
    assert metrics.prometheus_name("9/a-b") == "_9:a:b"


def test_label_sets_from_requests_are_bounded(monkeypatch):
    monkeypatch.setattr(metrics, "MAX_SERIES_PER_METRIC", 2)
    tf_metrics = metrics.TfServingMetrics()
    for name in ["a", "b", "c", "d", "a"]:
        tf_metrics.request(name, "NOT_FOUND", "predict", "REST", None)
    lines = [line for line in tf_metrics.exposition().splitlines() if not line.startswith("#")]
    assert lines == [':tensorflow:serving:request_count{model_name="(other)",status="(other)"} 2',
                     ':tensorflow:serving:request_count{model_name="a",status="NOT_FOUND"} 2',
                     ':tensorflow:serving:request_count{model_name="b",status="NOT_FOUND"} 1']
