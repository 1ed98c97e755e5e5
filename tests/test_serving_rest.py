"""The REST app as plain WSGI, without a server: routing, methods, bodies, errors, logs;
and, in process, its waitress server's graceful shutdown (main.py's).

The same paths through a real server (waitress, a real export) are in test_serving.py.
"""

import concurrent.futures
import contextlib
import http.client
import io
import json
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("waitress")

import tensorflow as tf  # noqa: E402

from tensorflow.core.protobuf import meta_graph_pb2  # noqa: E402

from tetra_tf.serving.admission import Limits, ModelLimits  # noqa: E402
from tetra_tf.serving.errors import RequestError  # noqa: E402
from tetra_tf.serving.metrics import Metrics  # noqa: E402
from tetra_tf.serving.predictor import PredictResult  # noqa: E402
from tetra_tf.serving.rest import METRICS_PATH, RestApp  # noqa: E402

MODEL = "tetra"


class _Manager:
    """Serves one model name, version 1: a predict signature and a classify one."""

    signature_defs = {
        "serving_default": meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict"),
        "classes": meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/classify")}

    @contextlib.contextmanager
    def acquire(self, name, version):
        if name != MODEL or version not in (None, 1):
            raise RequestError(f"Servable not found for request: Latest({name})", 404)
        yield self

    def status_json(self, name, version):
        with self.acquire(name, version):
            return {"model_version_status": [{"version": "1", "state": "AVAILABLE"}]}

    def metadata_json(self):
        return {"model_spec": {"name": MODEL}}


class _Predictor:
    """Answers each sentence with a one-word tree; records what it was asked."""

    def __init__(self, fail_with=None):
        self.manager = _Manager()
        self.requests = []
        self._fail_with = fail_with

    def predict(self, request):
        self.requests.append(request)
        if self._fail_with is not None:
            raise self._fail_with
        with self.manager.acquire(request.model_name, request.version):
            pass
        inputs = request.decode({"sentences": tf.TensorSpec([None], tf.string)},
                                ModelLimits.of(Limits(), {}))
        sentences = inputs["sentences"]
        trees = np.array([b"(TOP (X " + s.split()[0] + b"))" for s in sentences], object)
        return PredictResult(request.model_name, 1, request.signature_name, len(sentences),
                             {"tree": trees})


def _call(app, method, path, body=None, content_length=None, terminated=True):
    """Runs one request through the WSGI app: (status, headers, body)."""
    data = b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": "127.0.0.1",
               "wsgi.input": io.BytesIO(data), "wsgi.input_terminated": terminated}
    if content_length is not None:
        environ["CONTENT_LENGTH"] = str(content_length)
    elif body is not None:
        environ["CONTENT_LENGTH"] = str(len(data))
    started = {}

    def start_response(status, headers):
        started["status"], started["headers"] = status, dict(headers)

    answer = b"".join(app(environ, start_response))
    return int(started["status"].split()[0]), started["headers"], answer


@pytest.fixture
def log_lines():
    return []


def _app(predictor, log_lines, max_request_bytes=1 << 20, **kwargs):
    return RestApp(predictor, max_request_bytes,
                   log_request=lambda fmt, *args: log_lines.append(fmt % args), **kwargs)


def test_predict_answers_json_and_logs_one_line_with_the_batch(log_lines):
    app = _app(_Predictor(), log_lines)
    status, headers, body = _call(app, "POST", f"/v1/models/{MODEL}:predict",
                                  {"instances": ["Hello world", "Bye"]})
    assert status == 200
    assert json.loads(body) == {"predictions": ["(TOP (X Hello))", "(TOP (X Bye))"]}
    assert headers["Content-Type"] == "application/json"
    assert headers["Content-Length"] == str(len(body))
    assert len(log_lines) == 1
    assert log_lines[0].startswith(f"127.0.0.1 POST /v1/models/{MODEL}:predict 200 ")
    assert log_lines[0].endswith(" batch=2")


def test_wrong_method_is_tf_servings_400_and_head_is_get_without_a_body(log_lines):
    predictor = _Predictor()
    app = _app(predictor, log_lines)
    status, headers, body = _call(app, "GET", f"/v1/models/{MODEL}:predict")
    assert status == 400 and "Allow" not in headers
    assert json.loads(body) == {"error": f"Malformed request: GET /v1/models/{MODEL}:predict"}
    status, _, body = _call(app, "POST", f"/v1/models/{MODEL}", {"instances": ["a"]})
    assert (status, json.loads(body)) == (
        400, {"error": f"Malformed request: POST /v1/models/{MODEL}"})
    assert _call(app, "PUT", f"/v1/models/{MODEL}/metadata")[0] == 400
    assert predictor.requests == []
    get = _call(app, "GET", f"/v1/models/{MODEL}")
    head = _call(app, "HEAD", f"/v1/models/{MODEL}")
    assert get[0] == head[0] == 200
    assert head[2] == b"" and head[1]["Content-Length"] == str(len(get[2]))


def test_unknown_paths_models_and_verbs(log_lines):
    app = _app(_Predictor(), log_lines)
    assert _call(app, "GET", "/v2/whatever")[0] == 404
    assert _call(app, "GET", "/v1/whatever")[0] == 400  # TF Serving's "Malformed request".
    assert _call(app, "POST", f"/v1/models/{MODEL}/versions/x:predict", {})[0] == 400
    assert _call(app, "GET", "/v1/models/nope")[0] == 404
    assert _call(app, "POST", "/v1/models/nope:classify", {"examples": [{}]})[0] == 404
    assert _call(app, "GET", f"/v1/models/{MODEL}/metadata")[0] == 200
    assert _call(app, "GET", "/v1/models")[0] == 400  # No model name.
    assert _call(app, "GET", METRICS_PATH)[0] == 404  # No metrics given to this app.
    assert len(log_lines) == 8


@pytest.mark.parametrize("verb, body, expected", [
    ("classify", {"examples": [{"x": 1}]}, (400, "Expected classification signature "
                                           "method_name to be tensorflow/serving/classify. "
                                           "Was: tensorflow/serving/predict")),
    ("regress", {"examples": [{"x": 1}]}, (400, "Expected regression signature method_name "
                                          "to be tensorflow/serving/regress. Was: "
                                          "tensorflow/serving/predict")),
    ("Classify", {"signature_name": "nope", "examples": [{}]},
     (400, "No signature was found with the name: nope")),
    ("classify", {"signature_name": "classes", "examples": [{}]},
     (501, "Unimplemented: signature classes is a classify signature; this server runs "
           "predict signatures only")),
    ("regress", {"signature_name": 3}, (400, "'signature_name' must be a string")),
    ("classify", b'{"examples": [', (400, None)),  # The body is parsed first.
])
def test_classify_and_regress_answer_as_tf_serving_does(log_lines, verb, body, expected):
    predictor = _Predictor()
    status, _, answer = _call(_app(predictor, log_lines), "POST",
                              f"/v1/models/{MODEL}:{verb}", body)
    assert status == expected[0]
    assert expected[1] is None or json.loads(answer) == {"error": expected[1]}
    assert predictor.requests == []


def test_metrics_path_is_the_apps_and_each_method_is_labelled_as_itself(log_lines):
    metrics = Metrics()
    app = _app(_Predictor(), log_lines, metrics=metrics, metrics_path="/tf/metrics")
    assert _call(app, "GET", METRICS_PATH)[0] == 404  # Only at the configured path.
    for verb in ("predict", "classify", "regress"):
        _call(app, "POST", f"/v1/models/{MODEL}:{verb}", {"instances": ["a"]})
    _call(app, "GET", f"/v1/models/{MODEL}/metadata")
    _call(app, "GET", f"/v1/models/{MODEL}")
    _call(app, "GET", "/v1/whatever")
    status, headers, body = _call(app, "GET", "/tf/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    for method, code in [("predict", "OK"), ("classify", "INVALID_ARGUMENT"),
                         ("regress", "INVALID_ARGUMENT"), ("metadata", "OK"),
                         ("status", "OK"), ("other", "INVALID_ARGUMENT")]:
        assert (f'tetra_serving_requests_total{{api="rest",method="{method}",'
                f'status="{code}"}} 1.0') in text.splitlines()
    lines = text.splitlines()
    assert f':tensorflow:serving:request_count{{model_name="{MODEL}",status="OK"}} 3' in lines
    assert (f':tensorflow:serving:request_count{{model_name="{MODEL}",'
            'status="INVALID_ARGUMENT"} 2') in lines
    assert ':tensorflow:serving:request_count{model_name="",status="INVALID_ARGUMENT"} 1' \
        in lines
    for api in ("predict", "metadata", "status"):  # Only successes are timed.
        assert (f':tensorflow:serving:request_latency_count{{model_name="{MODEL}",'
                f'API="{api}",entrypoint="REST"}} 1') in lines
    assert "classify" not in "".join(line for line in lines
                                     if line.startswith(":tensorflow:serving:request_latency"))
    disabled = _app(_Predictor(), log_lines, metrics=metrics, metrics_path=None)
    assert _call(disabled, "GET", METRICS_PATH)[0] == 404


def test_body_over_the_limit_is_413_before_the_predictor_runs(log_lines):
    predictor = _Predictor()
    app = _app(predictor, log_lines, max_request_bytes=50)
    body = {"instances": ["a " * 40]}
    status, _, answer = _call(app, "POST", f"/v1/models/{MODEL}:predict", body)
    assert status == 413 and "--max_request_bytes=50" in json.loads(answer)["error"]
    # No Content-Length, the input marked as ending: read at most one byte past the limit.
    status, _, _ = _call(app, "POST", f"/v1/models/{MODEL}:predict",
                         json.dumps(body).encode(), content_length="")
    assert status == 413
    assert predictor.requests == []
    assert _call(app, "POST", f"/v1/models/{MODEL}:predict", {"instances": ["a b"]},
                 )[0] == 200


def test_a_bug_answers_500_in_json_and_one_line_never_a_traceback(log_lines):
    app = _app(_Predictor(fail_with=ZeroDivisionError("division by zero")), log_lines)
    status, headers, body = _call(app, "POST", f"/v1/models/{MODEL}:predict",
                                  {"instances": ["a"]})
    assert status == 500 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"error": "Internal: ZeroDivisionError: division by zero"}
    assert len(log_lines) == 1 and " 500 " in log_lines[0]


def test_path_bytes_are_utf8_and_escaped_in_the_log(log_lines):
    predictor = _Predictor()
    app = _app(predictor, log_lines)
    # WSGI carries the percent-decoded path bytes as latin-1: "café" and a newline.
    path = "/v1/models/caf\u00c3\u00a9%0a:predict".replace("%0a", "\n")
    status, _, _ = _call(app, "POST", path, {"instances": ["a"]})
    assert status == 404
    assert predictor.requests[0].model_name == "caf\u00e9\n"
    assert len(log_lines) == 1 and "\n" not in log_lines[0]
    assert "/v1/models/caf\\xe9\\x0a:predict 404" in log_lines[0]


def test_body_length_that_is_not_a_number_or_not_given(log_lines):
    predictor = _Predictor()
    app = _app(predictor, log_lines)
    path = f"/v1/models/{MODEL}:predict"
    status, _, body = _call(app, "POST", path, {"instances": ["a"]}, content_length="12x")
    assert status == 400 and "Content-Length" in json.loads(body)["error"]
    # No length and the end of input not marked: WSGI's safe reading sees no body.
    status, _, body = _call(app, "POST", path, b'{"instances": ["a"]}', content_length="",
                            terminated=False)
    assert status == 400 and "JSON" in json.loads(body)["error"]
    assert len(log_lines) == 2


def test_only_a_lingering_channel_changes_waitress_readable_and_writable():
    from waitress.channel import HTTPChannel

    from tetra_tf.serving import rest

    channel_class = rest._lingering_channel_class(HTTPChannel)
    # waitress's event loop asks every connection on every turn: no wrapper there.
    assert channel_class.readable is HTTPChannel.readable
    assert channel_class.writable is HTTPChannel.writable
    lingering = rest._lingering_class(channel_class)
    assert issubclass(lingering, channel_class) and lingering.readable is not HTTPChannel.readable
    assert rest._lingering_class(channel_class) is lingering  # One class per channel class.


class _StoppedGrpcServer:
    """A gRPC server's stop() as main.py's shutdown uses it: returns a set event."""

    def stop(self, grace):
        stopped = threading.Event()
        stopped.set()
        return stopped


def test_shutdown_stops_accepting_then_answers_the_request_in_progress():
    """create_rest_server (rest.py) builds the server; main.py's shutdown closes its
    listening socket, waits for the request in progress, then closes every connection."""
    from tetra_tf.serving import main as serving_main
    from tetra_tf.serving.rest import create_rest_server

    started, release = threading.Event(), threading.Event()

    def app(environ, start_response):
        started.set()
        release.wait(60)
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    in_flight = serving_main._InFlightCounter(app)
    server = create_rest_server(in_flight, "127.0.0.1", 0, threads=2)
    port = server.effective_port
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def get():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            connection.request("GET", "/")
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    stopped = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        answer = pool.submit(get)
        assert started.wait(60)
        shutdown = pool.submit(serving_main._shut_down, server, thread, in_flight,
                               _StoppedGrpcServer(), 60, lambda: stopped.append(True))
        deadline = time.monotonic() + 60
        while True:  # The listening socket closes first...
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                break
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert not shutdown.done()  # ...then it waits for the request in progress...
        release.set()
        assert answer.result(timeout=60) == (200, b"ok")  # ...whose answer goes out.
        shutdown.result(timeout=60)
    assert not thread.is_alive() and stopped == [True]  # Version polling stopped too.
