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

from tetra_tf.serving.admission import Limits, ModelLimits  # noqa: E402
from tetra_tf.serving.errors import RequestError  # noqa: E402
from tetra_tf.serving.predictor import PredictResult  # noqa: E402
from tetra_tf.serving.rest import METRICS_PATH, RestApp  # noqa: E402

MODEL = "tetra"


class _Manager:
    """Serves one model name, version 1."""

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


def _app(predictor, log_lines, max_request_bytes=1 << 20):
    return RestApp(predictor, max_request_bytes,
                   log_request=lambda fmt, *args: log_lines.append(fmt % args))


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


def test_wrong_method_is_405_with_allow_and_head_is_get_without_a_body(log_lines):
    predictor = _Predictor()
    app = _app(predictor, log_lines)
    status, headers, body = _call(app, "GET", f"/v1/models/{MODEL}:predict")
    assert status == 405 and headers["Allow"] == "POST"
    assert "GET is not allowed here, use POST" in json.loads(body)["error"]
    assert _call(app, "POST", f"/v1/models/{MODEL}", {"instances": ["a"]})[0] == 405
    assert predictor.requests == []
    get = _call(app, "GET", f"/v1/models/{MODEL}")
    head = _call(app, "HEAD", f"/v1/models/{MODEL}")
    assert get[0] == head[0] == 200
    assert head[2] == b"" and head[1]["Content-Length"] == str(len(get[2]))


def test_unknown_paths_models_and_verbs(log_lines):
    app = _app(_Predictor(), log_lines)
    assert _call(app, "GET", "/v2/whatever")[0] == 404
    assert _call(app, "GET", "/v1/models/nope")[0] == 404
    status, _, body = _call(app, "POST", f"/v1/models/{MODEL}:classify", {"instances": ["a"]})
    assert status == 501 and ":classify" in json.loads(body)["error"]
    assert _call(app, "POST", "/v1/models/nope:classify", {"instances": ["a"]})[0] == 404
    assert _call(app, "GET", f"/v1/models/{MODEL}/metadata")[0] == 200
    assert _call(app, "GET", "/v1/models")[0] == 400  # No model name.
    assert _call(app, "GET", METRICS_PATH)[0] == 404  # No metrics given to this app.
    assert len(log_lines) == 7


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
