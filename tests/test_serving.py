"""Tests for the server (tetra_tf.serving, run as serving/server.py) and its client.

The server runs as a subprocess on a free 127.0.0.1 port, serving a toy SavedModel with the
same interface as the parser's export (a [B] string `sentences` input; num_words, words,
tree and score outputs; a `parse_words` signature) plus a two-input `label` signature. The
last test exports a tiny random tagger with tetra_tf/export.py, serves it, and checks that
trees parsed over REST equal tetra_tf.Parser's.
"""

import base64
import collections
import concurrent.futures
import contextlib
import http.client
import json
import logging
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tensorflow as tf

# The server's own dependencies: the 'serving' extra (pip install -e ".[serving]").
for _module in ("waitress", "grpc", "tensorflow_serving", "prometheus_client"):
    pytest.importorskip(_module, reason="needs the 'serving' extra: pip install -e "
                        '".[serving]"')

from conftest import free_port, subprocess_env  # noqa: E402
from tetra_tf.serving import codecs, metrics  # noqa: E402
from tetra_tf.serving import client as serving_client  # noqa: E402


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER_SCRIPT = os.path.join(REPO_ROOT, "serving", "server.py")
CLIENT_SCRIPT = os.path.join(REPO_ROOT, "serving", "client.py")
MODEL_NAME = "toy"
SERVED_VERSION = 3
MAX_REQUEST_BYTES = 200_000
STARTUP_TIMEOUT_S = 90.0
HTTP_TIMEOUT_S = 60.0  # Generous: the test machine is shared and often loaded.
READ_TIMEOUT_S = 2.0
SERVER_PIDS = {}  # REST port → the server process's id


class ToyParser(tf.Module):
    """The export's interface with trivial behaviour: the tree is "(S w1 w2 ...)"."""

    def __init__(self, root="S"):
        super().__init__()
        self.root = root  # The tree's root label (tells versions apart).

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="sentences")])
    def parse(self, sentences):
        words = tf.strings.split(sentences)
        num_words = tf.cast(words.row_lengths(), tf.int32)
        joined = tf.strings.reduce_join(words, axis=-1, separator=" ")
        return {"num_words": num_words, "words": words.to_tensor(""),
                "tree": tf.strings.join([f"({self.root} ", joined, ")"]),
                "score": tf.cast(num_words, tf.float32) * 0.5}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.string, name="words"),
                                  tf.TensorSpec([None], tf.int32, name="num_words")])
    def parse_words(self, words, num_words):
        mask = tf.sequence_mask(num_words, tf.shape(words)[1])
        joined = tf.strings.reduce_join(tf.ragged.boolean_mask(words, mask), axis=-1,
                                        separator=" ")
        return {"num_words": num_words, "tree": tf.strings.join(["(S ", joined, ")"])}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                                  tf.TensorSpec([None], tf.int32, name="count")])
    def label(self, text, count):
        # An error raised inside the graph (as the export's own limits are): HTTP 400.
        check = tf.debugging.assert_less(count, 1000, message="count must be under 1000")
        with tf.control_dependencies([check]):
            return {"labelled": tf.strings.join([text, tf.strings.as_string(count)],
                                                separator="#")}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text"),
                                  tf.TensorSpec([None], tf.int32, name="sleep_ms")])
    def slow(self, text, sleep_ms):
        """Echoes text after sleeping max(sleep_ms): a model call that takes a while."""
        from tensorflow.python.data.experimental.ops.testing import sleep

        microseconds = tf.cast(tf.reduce_max(sleep_ms), tf.int64) * 1000
        done = tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).apply(
            sleep(microseconds)).reduce(tf.constant(0, tf.int64), lambda a, b: a + b)
        with tf.control_dependencies([done]):
            return {"echo": tf.identity(text)}


def _expected(sentence):
    words = sentence.split()
    return {"num_words": len(words), "words": words, "tree": f"(S {' '.join(words)})",
            "score": 0.5 * len(words)}


def _http(port, method, path, body=None, headers=None):
    """Returns (status, decoded JSON body) for one request to the local server."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode("utf-8")
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, json.loads(response.read().decode("utf-8"))
    finally:
        connection.close()


@pytest.fixture(scope="module")
def model_base_path(tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / MODEL_NAME
    module = ToyParser()
    tf.saved_model.save(module, str(base / str(SERVED_VERSION)),
                        signatures={"serving_default": module.parse, "label": module.label,
                                    "parse_words": module.parse_words, "slow": module.slow})
    # Lower versions, a higher directory without a SavedModel and a non-numeric one: the
    # server must pick version 3.
    shutil.copytree(base / str(SERVED_VERSION), base / "1")
    (base / "7").mkdir()
    (base / "12.tmp").mkdir()
    return base


def _absl_line_time(line: str, near: float) -> float:
    """The time.time() of an absl log line ("I1126 15:04:14.123456 ..."), whose prefix
    has no year: the year that puts it nearest to `near`."""
    match = re.match(r"[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) ", line)
    assert match, line
    month, day, hour, minute, second, micros = (int(g) for g in match.groups())
    year = time.localtime(near).tm_year
    candidates = [time.mktime((y, month, day, hour, minute, second, 0, 0, -1)) + micros / 1e6
                  for y in (year - 1, year, year + 1)]
    return min(candidates, key=lambda t: abs(t - near))


@contextlib.contextmanager
def _running_server(base_path, model_name, log_path, *flags, while_starting=None,
                    grpc_port=None, in_flight_at_shutdown=None):
    """Starts serving/server.py on a free port; yields the port once the model is available.

    The gRPC API listens on grpc_port (a free port when None). With base_path None, the
    flags name the models (--model_config_file); model_name is the one waited for.

    while_starting, if given, is called after the server process starts (to overlap work
    with its startup). On exit, checks that SIGTERM shuts the server down cleanly; with
    in_flight_at_shutdown(port), a request that is in its model call at the SIGTERM.
    """
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, SERVER_SCRIPT, *([f"--model_base_path={base_path}",
                                               f"--model_name={model_name}"]
                                              if base_path is not None else []),
             f"--rest_api_port={port}", f"--port={grpc_port or free_port()}", *flags],
            stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT,
            env=subprocess_env())
    try:
        if while_starting is not None:
            while_starting()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"server exited with {process.returncode}:\n{log_path.read_text()}")
            try:
                if _http(port, "GET", f"/v1/models/{model_name}")[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not ready in {STARTUP_TIMEOUT_S} s:\n{log_path.read_text()}")
            time.sleep(0.2)
        SERVER_PIDS[port] = process.pid
        yield port
        in_flight = None
        if in_flight_at_shutdown is not None:
            before = _metric_values(port)
            in_flight = concurrent.futures.ThreadPoolExecutor(max_workers=1)
            pending = in_flight.submit(in_flight_at_shutdown, port)
            _wait_for_metrics(port, _model_call_began(before), pending)  # Then SIGTERM.
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log_path.read_text()
        if in_flight is not None:
            pending.result(timeout=HTTP_TIMEOUT_S)
            in_flight.shutdown()
        assert "shutting down" in log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="module")
def server_process(model_base_path, tmp_path_factory):
    """The toy model's server: yields (port, log path)."""
    log_path = tmp_path_factory.mktemp("server_log") / "server.log"
    with _running_server(model_base_path, MODEL_NAME, log_path,
                         f"--max_request_bytes={MAX_REQUEST_BYTES}",
                         "--max_batch_size=16", "--max_words_per_sentence=1000",
                         f"--request_read_timeout_s={READ_TIMEOUT_S}") as port:
        yield port, log_path


@pytest.fixture
def server(server_process):
    """The running server's port."""
    return server_process[0]


def test_one_log_line_per_request(server_process):
    port, log_path = server_process
    paths = [f"/v1/models/{MODEL_NAME}/versions/{SERVED_VERSION}", "/log-test-404"]
    assert [_http(port, "GET", path)[0] for path in paths] == [200, 404]
    expected = [f"GET {path} {status}" for path, status in zip(paths, [200, 404])]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = log_path.read_text().splitlines()
        if all(any(e in line for line in lines) for e in expected):
            break
        time.sleep(0.1)
    for e in expected:
        assert sum(e in line for line in lines) == 1, (e, lines[-5:])


def test_model_calls_are_timed_without_batching(server):
    before = _metric_values(server)
    for sentence in ["a b", "c d e"]:
        assert _http(server, "POST", _PREDICT, {"instances": [sentence]})[0] == 200
    after = _metric_values(server)
    assert _metric_delta(before, after, "tetra_serving_model_call_seconds_count") == 2
    assert _metric_delta(before, after, "tetra_serving_model_call_seconds_sum") > 0


def test_model_status(server):
    expected = {"model_version_status": [{
        "version": str(SERVED_VERSION), "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""}}]}
    assert _http(server, "GET", f"/v1/models/{MODEL_NAME}") == (200, expected)
    assert _http(server, "GET", f"/v1/models/{MODEL_NAME}/versions/{SERVED_VERSION}") == (
        200, expected)
    status, body = _http(server, "GET", f"/v1/models/{MODEL_NAME}/versions/1")
    assert status == 404 and list(body) == ["error"]
    status, body = _http(server, "GET", "/v1/models/nonexistent")
    assert status == 404 and "nonexistent" in body["error"]


def test_metadata_describes_the_signatures(server):
    status, body = _http(server, "GET", f"/v1/models/{MODEL_NAME}/metadata")
    assert status == 200
    assert body["model_spec"] == {"name": MODEL_NAME, "signature_name": "",
                                  "version": str(SERVED_VERSION)}
    signature_defs = body["metadata"]["signature_def"]["signature_def"]
    default = signature_defs["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert set(default["inputs"]) == {"sentences"}
    sentences = default["inputs"]["sentences"]
    assert sentences["dtype"] == "DT_STRING"
    assert sentences["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}],
                                         "unknown_rank": False}
    outputs = default["outputs"]
    assert {name: info["dtype"] for name, info in outputs.items()} == {
        "num_words": "DT_INT32", "words": "DT_STRING", "tree": "DT_STRING",
        "score": "DT_FLOAT"}
    assert [d["size"] for d in outputs["words"]["tensor_shape"]["dim"]] == ["-1", "-1"]
    assert {name: info["dtype"] for name, info in signature_defs["label"]["inputs"].items()} == {
        "text": "DT_STRING", "count": "DT_INT32"}
    assert _http(server, "GET", f"/v1/models/{MODEL_NAME}/versions/1/metadata")[0] == 404


def test_predict_row_format(server):
    sentences = ["The cat sat .", "Ça va , très bien !", "x"]
    status, body = _http(server, "POST", f"/v1/models/{MODEL_NAME}:predict",
                         {"instances": sentences})
    assert status == 200, body
    assert list(body) == ["predictions"] and len(body["predictions"]) == len(sentences)
    max_words = max(len(s.split()) for s in sentences)
    for sentence, prediction in zip(sentences, body["predictions"]):
        expected = _expected(sentence)
        assert prediction["num_words"] == expected["num_words"]
        # Rows are padded to the longest sentence of the request, as TF Serving does.
        assert prediction["words"] == expected["words"] + [""] * (
            max_words - expected["num_words"])
        assert prediction["tree"] == expected["tree"]
        assert prediction["score"] == pytest.approx(expected["score"])


def test_predict_columnar_format_with_version_and_b64(server):
    sentences = ["A dog barked loudly .", "Hello"]
    request = {"signature_name": "serving_default",
               "inputs": [sentences[0], {"b64": base64.b64encode(sentences[1].encode()).decode()}]}
    status, body = _http(server, "POST",
                         f"/v1/models/{MODEL_NAME}/versions/{SERVED_VERSION}:predict", request)
    assert status == 200, body
    outputs = body["outputs"]
    assert outputs["num_words"] == [5, 1]
    assert outputs["tree"] == [_expected(s)["tree"] for s in sentences]
    assert outputs["words"] == [sentences[0].split(), ["Hello", "", "", "", ""]]
    assert outputs["score"] == pytest.approx([2.5, 0.5])


def test_predict_two_input_signature(server):
    path = f"/v1/models/{MODEL_NAME}:predict"
    status, body = _http(server, "POST", path, {
        "signature_name": "label",
        "instances": [{"text": "a", "count": 1}, {"text": "b c", "count": -7}]})
    # One output: each prediction is the bare value.
    assert (status, body) == (200, {"predictions": ["a#1", "b c#-7"]})
    status, body = _http(server, "POST", path, {
        "signature_name": "label", "inputs": {"text": ["z"], "count": [42]}})
    assert (status, body) == (200, {"outputs": ["z#42"]})
    status, body = _http(server, "POST", path, {
        "signature_name": "label", "instances": [{"text": "a", "count": "1"}]})
    assert status == 400 and "count" in body["error"]


def test_predict_pre_split_words(server):
    status, body = _http(server, "POST", f"/v1/models/{MODEL_NAME}:predict", {
        "signature_name": "parse_words",
        "instances": [{"words": ["The", "cat", "."], "num_words": 3},
                      {"words": ["Hi", "", ""], "num_words": 1}]})
    assert status == 200, body
    assert [p["tree"] for p in body["predictions"]] == ["(S The cat .)", "(S Hi)"]


def test_concurrent_clients_get_their_own_answers(server):
    num_clients, requests_per_client = 8, 50
    path = f"/v1/models/{MODEL_NAME}:predict"

    def run_client(client_id):
        connection = http.client.HTTPConnection("127.0.0.1", server, timeout=HTTP_TIMEOUT_S)
        mismatches = []
        try:
            for request_id in range(requests_per_client):
                # Unique words and a length that varies between requests.
                sentence = " ".join([f"c{client_id}", f"r{request_id}"]
                                    + ["w"] * ((client_id * 7 + request_id) % 13))
                connection.request("POST", path, body=json.dumps({"instances": [sentence]}))
                response = connection.getresponse()
                body = json.loads(response.read())
                prediction = body["predictions"][0] if response.status == 200 else body
                expected = _expected(sentence)
                if (response.status != 200 or prediction["words"] != expected["words"]
                        or prediction["num_words"] != expected["num_words"]
                        or prediction["tree"] != expected["tree"]):
                    mismatches.append((sentence, response.status, prediction))
        finally:
            connection.close()
        return mismatches

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=num_clients) as pool:
        results = list(pool.map(run_client, range(num_clients), timeout=120))
    elapsed = time.perf_counter() - started
    assert [m for mismatches in results for m in mismatches] == []
    print(f"{num_clients * requests_per_client} requests from {num_clients} clients in "
          f"{elapsed:.2f} s")


_PREDICT = f"/v1/models/{MODEL_NAME}:predict"
_BAD_REQUESTS = {
    # name: (method, path, body, expected status)
    "malformed JSON": ("POST", _PREDICT, b'{"instances": ["a b"', 400),
    "body not an object": ("POST", _PREDICT, b'["a b"]', 400),
    "missing instances/inputs": ("POST", _PREDICT, {"sentences": ["a b"]}, 400),
    "both instances and inputs": ("POST", _PREDICT, {"instances": ["a"], "inputs": ["a"]}, 400),
    "instances not a list": ("POST", _PREDICT, {"instances": "a b"}, 400),
    "number instead of string": ("POST", _PREDICT, {"instances": ["a", 3]}, 400),
    "null sentence": ("POST", _PREDICT, {"instances": [None]}, 400),
    "unknown named input": ("POST", _PREDICT, {"instances": [{"text": "a b"}]}, 400),
    "nested sentence lists": ("POST", _PREDICT, {"inputs": [["a"], ["b"]]}, 400),
    "signature_name not a string": ("POST", _PREDICT,
                                    {"signature_name": 1, "instances": ["a"]}, 400),
    "empty sentence": ("POST", _PREDICT, {"instances": ["ok", ""]}, 400),
    "blank sentence": ("POST", _PREDICT, {"inputs": [" \t "]}, 400),
    "no instances": ("POST", _PREDICT, {"instances": []}, 400),
    "too many instances": ("POST", _PREDICT, {"instances": ["a"] * 17}, 400),
    "10,000-word sentence": ("POST", _PREDICT,
                             {"instances": [" ".join(["word"] * 10_000)]}, 400),
    "invalid UTF-8 body": ("POST", _PREDICT, b'{"instances": ["caf\xe9 au lait"]}', 400),
    "invalid UTF-8 in b64": ("POST", _PREDICT, {"instances": [{"b64": "/y8="}]}, 400),
    "lone surrogate": ("POST", _PREDICT, b'{"instances": ["\\ud800 x"]}', 400),
    "bad base64": ("POST", _PREDICT, {"instances": [{"b64": "not base64!"}]}, 400),
    "unknown signature": ("POST", _PREDICT, {"signature_name": "nope", "instances": ["a"]},
                          400),
    "word with a space": ("POST", _PREDICT, {"signature_name": "parse_words", "instances": [
        {"words": ["a b", "c"], "num_words": 2}]}, 400),
    "empty word": ("POST", _PREDICT, {"signature_name": "parse_words", "instances": [
        {"words": ["a", ""], "num_words": 2}]}, 400),
    "num_words over the row width": ("POST", _PREDICT, {"signature_name": "parse_words",
                                                       "instances": [{"words": ["a"],
                                                                      "num_words": 2}]}, 400),
    "no words in a row": ("POST", _PREDICT, {"signature_name": "parse_words", "instances": [
        {"words": ["a"], "num_words": 0}]}, 400),
    "rows of 2,000 words": ("POST", _PREDICT, {"signature_name": "parse_words", "instances": [
        {"words": ["w"] * 2000, "num_words": 2000}]}, 400),
    "unknown model": ("POST", "/v1/models/nope:predict", {"instances": ["a"]}, 404),
    "unknown version": ("POST", f"/v1/models/{MODEL_NAME}/versions/9:predict",
                        {"instances": ["a"]}, 404),
    "unknown path": ("GET", "/v2/whatever", None, 404),
    # TF Serving's answers: 400 "Malformed request" for any /v1/ request it cannot route.
    "unknown /v1/ path": ("GET", "/v1/whatever", None, 400),
    "GET on predict": ("GET", _PREDICT, None, 400),
    "POST on status": ("POST", f"/v1/models/{MODEL_NAME}", {"instances": ["a"]}, 400),
    "classify on a predict signature": ("POST", f"/v1/models/{MODEL_NAME}:classify",
                                        {"examples": [{"sentences": "a b"}]}, 400),
    "regress on a predict signature": ("POST", f"/v1/models/{MODEL_NAME}:regress",
                                       {"signature_name": "label", "examples": [{}]}, 400),
    "classify on an unknown model": ("POST", "/v1/models/nope:classify", {"examples": [{}]},
                                     404),
    "body over the size limit": ("POST", _PREDICT,
                                 {"instances": ["x" * (MAX_REQUEST_BYTES + 1)]}, 413),
    "5,000-digit integer": ("POST", _PREDICT, b'{"signature_name": "label", "instances": '
                            b'[{"text": "a", "count": ' + b"9" * 5000 + b"}]}", 400),
    "21-digit integer": ("POST", _PREDICT, b'{"signature_name": "label", "instances": '
                         b'[{"text": "a", "count": -' + b"9" * 21 + b"}]}", 400),
    "5,000-digit version in predict": (
        "POST", f"/v1/models/{MODEL_NAME}/versions/{'9' * 5000}:predict", {"instances": ["a"]},
        400),
    "5,000-digit version in status": (
        "GET", f"/v1/models/{MODEL_NAME}/versions/{'9' * 5000}", None, 400),
    "version over int64": ("GET", f"/v1/models/{MODEL_NAME}/versions/{2 ** 63}/metadata", None,
                           400),
}


@pytest.mark.parametrize("name", sorted(_BAD_REQUESTS))
def test_bad_request_gets_error_and_server_keeps_serving(server, name):
    method, path, body, expected_status = _BAD_REQUESTS[name]
    status, answer = _http(server, method, path, body)  # a hang fails by HTTP_TIMEOUT_S
    assert status == expected_status, answer
    assert list(answer) == ["error"] and isinstance(answer["error"], str) and answer["error"]
    status, answer = _http(server, "POST", _PREDICT, {"instances": ["still serving ."]})
    assert status == 200 and answer["predictions"][0]["tree"] == "(S still serving .)"


def test_chunked_body_is_counted_against_the_limit(server):
    """A chunked body over --max_request_bytes gets 413, not a parse of its first MiB."""
    def chunked(total_bytes):
        yield b'{"instances": ["'
        for _ in range(total_bytes // 1_000):
            yield b"x" * 1_000
        yield b'"]}'

    # The server reads past the limit only to drop it, so the client gets its 413 (not a
    # connection reset) even when much more is still on its way.
    for total_bytes, expected in [(1_000, 200), (MAX_REQUEST_BYTES + 10_000, 413),
                                  (8 * MAX_REQUEST_BYTES, 413)]:
        connection = http.client.HTTPConnection("127.0.0.1", server, timeout=HTTP_TIMEOUT_S)
        try:
            connection.request("POST", _PREDICT, body=chunked(total_bytes),
                               encode_chunked=True)
            response = connection.getresponse()
            answer = json.loads(response.read())
        finally:
            connection.close()
        assert response.status == expected, answer
        if expected == 413:
            assert "--max_request_bytes" in answer["error"]
        else:
            assert answer["predictions"][0]["num_words"] == 1


def test_stalled_body_is_cut_off(server):
    """A client that stops sending mid-body loses its connection after the read timeout."""
    with socket.create_connection(("127.0.0.1", server), timeout=HTTP_TIMEOUT_S) as sock:
        sock.sendall(f"POST {_PREDICT} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                     '\r\n{"instances": '.encode())
        data = sock.recv(4096)  # Blocks until the server closes the connection.
    assert data == b""  # Closed by the server (a timeout here would raise instead).
    status, answer = _http(server, "POST", _PREDICT, {"instances": ["still serving ."]})
    assert status == 200


def test_access_log_writes_every_line_in_order_off_the_request_threads():
    written = []

    class Collect(logging.Handler):
        def emit(self, record):
            written.append((record.getMessage(), record.funcName, threading.get_ident()))

    access_log = metrics.AccessLog(Collect(), level=logging.INFO)
    lines_per_thread = 300

    def request_thread(k):
        for i in range(lines_per_thread):
            access_log.info("client %d line %d", k, i)

    threads = [threading.Thread(target=request_thread, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    access_log.stop()  # Writes what is still queued.
    assert len(written) == 8 * lines_per_thread
    for k in range(8):
        assert [message for message, _, _ in written if message.startswith(f"client {k} ")] \
            == [f"client {k} line {i}" for i in range(lines_per_thread)]
    # Records name the caller, and one listener thread (none of the callers) wrote them.
    assert {function for _, function, _ in written} == {"request_thread"}
    writers = {ident for _, _, ident in written}
    assert len(writers) == 1 and writers.isdisjoint(t.ident for t in threads)


@pytest.mark.parametrize("array", [
    np.array([b"(TOP (S (NP x)))", "é ü".encode()], dtype=object),
    np.array([[b"a", b""], [b"c", b"d"]], dtype=object),
    np.array([[1, -1, 7]], dtype=np.int32), np.array([2 ** 40, -3], dtype=np.int64),
    np.array([-0.25, 3.5], dtype=np.float32), np.array([[True, False]]),
    np.zeros((0, 3), dtype=np.int32), np.array(5, dtype=np.int32),
    np.array([1.5, -2.0], dtype=np.float64),
    np.array(["ab", "c"]),  # numpy unicode: tf.make_tensor_proto's way
], ids=lambda array: f"{array.dtype}{list(array.shape)}")
def test_output_tensor_protos_read_back_as_tf_makes_them(array):
    proto = codecs.tensor_proto(array)
    reference = tf.make_tensor_proto(array)
    assert proto.dtype == reference.dtype
    assert proto.tensor_shape == reference.tensor_shape
    back, expected = tf.make_ndarray(proto), tf.make_ndarray(reference)
    assert back.dtype == expected.dtype and back.shape == expected.shape
    assert back.tolist() == expected.tolist()


def test_request_data_cannot_forge_log_lines(server_process):
    port, log_path = server_process
    forged = "FORGED 127.0.0.1 GET /v1/models/toy 200"
    status, _ = _http(port, "GET", "/v1/x%0a" + forged.replace(" ", "%20") + "%0d%0aEND")
    assert status == 400  # TF Serving's "Malformed request" for a /v1/ path it cannot route.
    deadline = time.monotonic() + 10
    while "FORGED" not in log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [line for line in log_path.read_text().splitlines() if "FORGED" in line]
    assert len(lines) == 1 and "\\x0aFORGED" in lines[0] and "\\x0d\\x0aEND" in lines[0]


def test_client_parse(server):
    sentences = [f"sentence {i} ." for i in range(5)] + ["Ünïcödé wörds ."]
    trees = serving_client.parse(sentences, server=f"http://127.0.0.1:{server}",
                                 model_name=MODEL_NAME, batch_size=2, timeout_s=HTTP_TIMEOUT_S)
    assert trees == [_expected(s)["tree"] for s in sentences]
    with pytest.raises(ValueError, match="empty"):
        serving_client.parse(["a", "  "], server=f"http://127.0.0.1:{server}")
    with pytest.raises(serving_client.ServingError) as error:
        serving_client.parse(["a"], server=f"http://127.0.0.1:{server}", model_name="nope")
    assert error.value.status == 404 and "nope" in str(error.value)


def _run_client_cli(*args, stdin=None):
    return subprocess.run([sys.executable, CLIENT_SCRIPT, *args], input=stdin,
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
                          env=subprocess_env())


def test_client_command_line(server):
    address = f"--server=http://127.0.0.1:{server}"
    result = _run_client_cli(address, f"--model_name={MODEL_NAME}", "The cat sat .",
                             "Another sentence .")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["(S The cat sat .)", "(S Another sentence .)"]
    result = _run_client_cli(address, f"--model_name={MODEL_NAME}", stdin="one\ntwo words\n")
    assert (result.returncode, result.stdout) == (0, "(S one)\n(S two words)\n")
    result = _run_client_cli(address, "--model_name=nope", "a")
    assert result.returncode == 2 and "error" in result.stderr and not result.stdout
    result = _run_client_cli(f"--server=http://127.0.0.1:{free_port()}", "a")
    assert result.returncode == 1 and "cannot reach" in result.stderr


@pytest.mark.parametrize("base_path", ["missing", "empty"])
def test_server_usage_errors(tmp_path, base_path):
    (tmp_path / "empty").mkdir()
    result = subprocess.run(
        [sys.executable, SERVER_SCRIPT, f"--model_base_path={tmp_path / base_path}",
         f"--rest_api_port={free_port()}"],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
        env=subprocess_env())
    assert result.returncode == 2
    assert "error" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# ----------------------------------------------------------------------------------------
# Cross-request batching (--enable_batching), metrics.


def test_batching_parameters_file_not_utf8_is_one_line_usage_error(tmp_path, model_base_path):
    parameters = tmp_path / "batching.txt"
    parameters.write_bytes(b"max_batch_size { value: 8 } # caf\xe9\n")
    result = subprocess.run(
        [sys.executable, SERVER_SCRIPT, f"--model_base_path={model_base_path}",
         f"--rest_api_port={free_port()}", f"--port={free_port()}", "--enable_batching",
         f"--batching_parameters_file={parameters}"],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
        env=subprocess_env())
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: --batching_parameters_file: {parameters} is not UTF-8 text (byte 34)"]


BATCHING_PARAMETERS = """max_batch_size { value: 8 }
batch_timeout_micros { value: 20000 }
max_enqueued_batches { value: 4 }
num_batch_threads { value: 1 }
"""


@pytest.fixture(scope="module")
def batching_server(model_base_path, tmp_path_factory):
    """The toy model's server with --enable_batching: yields (port, log path, gRPC port)."""
    root = tmp_path_factory.mktemp("batching_server")
    (root / "batching.txt").write_text(BATCHING_PARAMETERS)
    grpc_port = free_port()
    with _running_server(model_base_path, MODEL_NAME, root / "server.log",
                         "--enable_batching",
                         f"--batching_parameters_file={root / 'batching.txt'}",
                         "--max_batch_size=32", "--tensorflow_intra_op_parallelism=1",
                         grpc_port=grpc_port) as port:
        yield port, root / "server.log", grpc_port


def _metric_values(port):
    """{metric sample name with labels: value} from the Prometheus endpoint."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
    try:
        connection.request("GET", "/monitoring/prometheus/metrics")
        response = connection.getresponse()
        text = response.read().decode()
    finally:
        connection.close()
    assert response.status == 200
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def _metric_delta(before, after, name):
    """How much a metric sample grew between two `_metric_values` readings."""
    return after.get(name, 0) - before.get(name, 0)


def _wait_for_metrics(port, condition, pending=None):
    """Reads the metrics until condition(values) holds; returns those values. Fails after
    HTTP_TIMEOUT_S, or when the future `pending` finishes first."""
    deadline = time.monotonic() + HTTP_TIMEOUT_S
    while not condition(values := _metric_values(port)):
        assert time.monotonic() < deadline and not (pending and pending.done()), values
        time.sleep(0.02)
    return values


def _model_call_began(before):
    """A `_wait_for_metrics` condition: a model call began since `before` (a batch's size
    is counted just before its call, with or without batching)."""
    return lambda now: _metric_delta(before, now, "tetra_serving_batch_size_count") > 0


def _batched_request(client_id, request_id):
    """A request of a signature, size and width that vary; returns (body, expected)."""
    kind = (client_id + request_id) % 4
    if kind == 0:  # serving_default, 1-3 sentences of different lengths
        sentences = [" ".join([f"c{client_id}r{request_id}s{i}"] + ["w"] * ((i * 5 + request_id)
                                                                         % 9))
                     for i in range(1 + request_id % 3)]
        width = max(len(s.split()) for s in sentences)
        expected = [dict(_expected(s), words=_expected(s)["words"]
                         + [""] * (width - len(s.split()))) for s in sentences]
        return {"instances": sentences}, (200, expected)
    if kind == 1:  # parse_words, rows of different widths
        words = [f"c{client_id}", f"r{request_id}"] + ["v"] * (request_id % 5)
        row = {"words": words + [""] * (client_id % 3), "num_words": len(words)}
        return ({"signature_name": "parse_words", "instances": [row]},
                (200, [{"num_words": len(words), "tree": f"(S {' '.join(words)})"}]))
    if kind == 2:  # label: two inputs, one output
        return ({"signature_name": "label",
                 "instances": [{"text": f"c{client_id}", "count": request_id}]},
                (200, [f"c{client_id}#{request_id}"]))
    # label with a count the graph refuses: fails alone, with 400.
    return ({"signature_name": "label", "instances": [{"text": "bad", "count": 5000}]},
            (400, None))


def test_tensorflow_thread_flags_reach_tensorflow(server_process, batching_server):
    """--tensorflow_intra_op_parallelism is set before the model loads (TF would refuse it
    after); without it TensorFlow keeps its defaults."""
    assert "TensorFlow threads: intra-op 1, inter-op default" in batching_server[1].read_text()
    assert ("TensorFlow threads: intra-op default, inter-op default"
            in server_process[1].read_text())


def test_merged_batches_answer_each_client_its_own(batching_server):
    port = batching_server[0]
    before = _metric_values(port)
    num_clients, requests_per_client = 12, 12

    def run_client(client_id):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
        mismatches = []
        try:
            for request_id in range(requests_per_client):
                body, (expected_status, expected) = _batched_request(client_id, request_id)
                connection.request("POST", _PREDICT, body=json.dumps(body))
                response = connection.getresponse()
                answer = json.loads(response.read())
                if response.status != expected_status:
                    mismatches.append((body, response.status, answer))
                elif expected_status == 400:
                    if "count must be under 1000" not in answer["error"]:
                        mismatches.append((body, answer))
                elif answer["predictions"] != [
                        e if not isinstance(e, dict) else
                        {k: p[k] for k in e if k in p} | {k: e[k] for k in e if k != "score"}
                        for e, p in zip(expected, answer["predictions"])] or any(
                            isinstance(e, dict) and "score" in e
                            and p["score"] != pytest.approx(e["score"])
                            for e, p in zip(expected, answer["predictions"])):
                    mismatches.append((body, answer))
        finally:
            connection.close()
        return mismatches

    with concurrent.futures.ThreadPoolExecutor(max_workers=num_clients) as pool:
        results = list(pool.map(run_client, range(num_clients), timeout=300))
    assert [m for mismatches in results for m in mismatches] == []
    after = _metric_values(port)
    calls = _metric_delta(before, after, "tetra_serving_batch_size_count")
    rows = _metric_delta(before, after, "tetra_serving_batch_size_sum")
    # Requests were merged: fewer model calls than rows (bad requests also ran alone).
    assert calls < rows, (calls, rows)


def test_request_larger_than_a_batch_is_split(batching_server):
    port = batching_server[0]
    sentences = [" ".join([f"s{i}"] + ["x"] * (i % 7)) for i in range(21)]  # 3 batches of 8
    before = _metric_values(port)
    status, body = _http(port, "POST", _PREDICT, {"instances": sentences})
    assert status == 200, body
    width = max(len(s.split()) for s in sentences)
    assert [p["tree"] for p in body["predictions"]] == [_expected(s)["tree"] for s in sentences]
    assert [p["words"] for p in body["predictions"]] == [
        s.split() + [""] * (width - len(s.split())) for s in sentences]
    after = _metric_values(port)
    assert _metric_delta(before, after, "tetra_serving_batch_size_count") >= 3


def test_full_batch_queue_answers_503(batching_server):
    port = batching_server[0]

    def slow(rows, sleep_ms):
        return _http(port, "POST", _PREDICT, {"signature_name": "slow", "instances": [
            {"text": f"t{i}", "sleep_ms": sleep_ms} for i in range(rows)]})

    before = _metric_values(port)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        busy = pool.submit(slow, 1, 5000)  # Holds the one batch thread for 5 s...
        _wait_for_metrics(port, _model_call_began(before), busy)
        # ...from its model call on. Four full batches fill the queue
        # (max_enqueued_batches: 4)...
        queued = [pool.submit(slow, 8, 0) for _ in range(4)]
        _wait_for_metrics(port, lambda now: now["tetra_serving_queue_depth"] == 32)
        # ...so the next request is refused at once instead of waiting.
        status, body = slow(1, 0)
        assert status == 503, body
        assert "full" in body["error"]
        assert busy.result()[0] == 200
        assert [f.result()[0] for f in queued] == [200] * 4
    assert slow(1, 0)[0] == 200


def test_metrics_count_what_was_served(batching_server):
    port = batching_server[0]
    before = _metric_values(port)
    for sentence in ["a b", "c d e", "f"]:
        assert _http(port, "POST", _PREDICT, {"instances": [sentence]})[0] == 200
    for request in [{"instances": [""]}, {"instances": "x"}]:
        assert _http(port, "POST", _PREDICT, request)[0] == 400
    assert _http(port, "GET", "/v1/models/nope")[0] == 404
    after = _metric_values(port)

    def delta(name):
        return _metric_delta(before, after, name)

    assert delta('tetra_serving_requests_total{api="rest",method="predict",status="OK"}') == 3
    assert delta('tetra_serving_requests_total{api="rest",method="predict",'
                 'status="INVALID_ARGUMENT"}') == 2
    assert delta('tetra_serving_requests_total{api="rest",method="status",'
                 'status="NOT_FOUND"}') == 1
    assert delta('tetra_serving_request_latency_seconds_count{api="rest",'
                 'method="predict"}') == 5
    assert delta("tetra_serving_batch_size_count") == 3  # Bad requests never reach it.
    assert delta("tetra_serving_batch_size_sum") == 3
    # Each model call is timed, and its time is part of its request's latency.
    assert delta("tetra_serving_model_call_seconds_count") == 3
    assert 0 < delta("tetra_serving_model_call_seconds_sum") <= delta(
        'tetra_serving_request_latency_seconds_sum{api="rest",method="predict"}')
    assert after["tetra_serving_queue_depth"] == 0
    assert after["tetra_serving_model_version"] == SERVED_VERSION


def test_load_generator_clients_read_each_answer_on_one_connection(batching_server,
                                                                   monkeypatch):
    """bench/serving_load.py's lean clients: replayed requests, answers read whole."""
    import grpc

    monkeypatch.syspath_prepend(REPO_ROOT)
    from bench import serving_load

    monkeypatch.setattr(serving_load, "MODEL_NAME", MODEL_NAME)
    port, _, grpc_port = batching_server
    sentences = ["The cat sat .", "Ünïcödé wörds here .", "The cat sat ."]  # one replayed
    rest_parse = serving_load._rest_client(port)
    try:
        assert [rest_parse(s) for s in sentences] == [_expected(s)["tree"] for s in sentences]
        monkeypatch.setattr(serving_load, "MODEL_NAME", "nope")  # A replayed sentence too.
        with pytest.raises(RuntimeError, match="HTTP 404"):
            rest_parse("The cat sat .")
    finally:
        rest_parse.close()
    monkeypatch.setattr(serving_load, "MODEL_NAME", MODEL_NAME)
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        grpc_parse = serving_load._grpc_client(channel)
        assert [grpc_parse(s) for s in sentences] == [_expected(s)["tree"] for s in sentences]


def test_grpc_api_with_tf_serving_status_codes(batching_server):
    import grpc
    from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2,
                                         model_service_pb2_grpc, predict_pb2,
                                         prediction_service_pb2_grpc)

    port, _, grpc_port = batching_server
    before = _metric_values(port)
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = MODEL_NAME
        request.model_spec.signature_name = "label"
        request.inputs["text"].CopyFrom(tf.make_tensor_proto(["a", "b c"]))
        request.inputs["count"].CopyFrom(tf.make_tensor_proto([1, -7], dtype=tf.int32))
        response = stub.Predict(request, HTTP_TIMEOUT_S)
        assert tf.make_ndarray(response.outputs["labelled"]).tolist() == [b"a#1", b"b c#-7"]
        assert response.model_spec.version.value == SERVED_VERSION

        def code_of(call, request):
            with pytest.raises(grpc.RpcError) as error:
                call(request, HTTP_TIMEOUT_S)
            return error.value.code()

        bad = predict_pb2.PredictRequest()
        bad.CopyFrom(request)
        bad.inputs["count"].CopyFrom(tf.make_tensor_proto([1, 5000], dtype=tf.int32))
        assert code_of(stub.Predict, bad) == grpc.StatusCode.INVALID_ARGUMENT  # In-graph.
        bad.inputs["count"].CopyFrom(tf.make_tensor_proto([1.0, 2.0]))
        assert code_of(stub.Predict, bad) == grpc.StatusCode.INVALID_ARGUMENT  # dtype
        empty = predict_pb2.PredictRequest()
        empty.model_spec.name = MODEL_NAME
        empty.inputs["sentences"].CopyFrom(tf.make_tensor_proto(["ok", " "]))
        assert code_of(stub.Predict, empty) == grpc.StatusCode.INVALID_ARGUMENT
        missing = predict_pb2.PredictRequest()
        missing.CopyFrom(request)
        missing.model_spec.name = "nope"
        assert code_of(stub.Predict, missing) == grpc.StatusCode.NOT_FOUND
        missing.model_spec.name = MODEL_NAME
        missing.model_spec.version.value = 1
        assert code_of(stub.Predict, missing) == grpc.StatusCode.NOT_FOUND

        metadata_request = get_model_metadata_pb2.GetModelMetadataRequest()
        metadata_request.model_spec.name = MODEL_NAME
        metadata_request.metadata_field.append("signature_def")
        metadata = stub.GetModelMetadata(metadata_request, HTTP_TIMEOUT_S)
        signature_defs = get_model_metadata_pb2.SignatureDefMap()
        metadata.metadata["signature_def"].Unpack(signature_defs)
        assert set(signature_defs.signature_def) >= {"serving_default", "label",
                                                     "parse_words", "slow"}
        assert set(signature_defs.signature_def["label"].inputs) == {"text", "count"}

        model_stub = model_service_pb2_grpc.ModelServiceStub(channel)
        status_request = get_model_status_pb2.GetModelStatusRequest()
        status_request.model_spec.name = MODEL_NAME
        status = model_stub.GetModelStatus(status_request, HTTP_TIMEOUT_S)
        assert [(v.version, v.state) for v in status.model_version_status] == [
            (SERVED_VERSION, get_model_status_pb2.ModelVersionStatus.AVAILABLE)]
        status_request.model_spec.name = "nope"
        assert code_of(model_stub.GetModelStatus, status_request) == grpc.StatusCode.NOT_FOUND
    after = _metric_values(port)
    assert _metric_delta(
        before, after, 'tetra_serving_requests_total{api="grpc",method="predict",status="OK"}'
    ) == 1


# ----------------------------------------------------------------------------------------
# New versions without a restart (--file_system_poll_wait_seconds).


def _save_toy_version(base, version, root):
    """Saves a ToyParser with tree root `root` as base/version, moved into place whole."""
    module = ToyParser(root)
    staging = base.parent / f".staging-{version}"
    tf.saved_model.save(module, str(staging),
                        signatures={"serving_default": module.parse, "slow": module.slow})
    os.rename(staging, base / str(version))


@pytest.mark.server
def test_new_version_is_served_without_a_restart_and_loses_no_request(tmp_path):
    base = tmp_path / "models" / MODEL_NAME
    base.mkdir(parents=True)
    _save_toy_version(base, 1, "V1")
    log_path = tmp_path / "server.log"
    slow_ms = 8000  # The request in flight on version 1 while version 2 arrives.

    def slow_request_during_shutdown(port):
        """A request in flight at SIGTERM is answered before the server exits."""
        assert _http(port, "POST", _PREDICT, {"signature_name": "slow", "instances": [
            {"text": "bye", "sleep_ms": 3000}]}) == (200, {"predictions": ["bye"]})

    with _running_server(base, MODEL_NAME, log_path, "--file_system_poll_wait_seconds=0.2",
                         "--enable_batching",
                         in_flight_at_shutdown=slow_request_during_shutdown) as port:
        stop = threading.Event()
        roots_seen = []  # in the order the answers came, across clients
        roots_by_client = collections.defaultdict(list)

        def run_client(client_id):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT_S)
            failures, count = [], 0
            try:
                while not stop.is_set():
                    sentence = f"c{client_id} r{count}"
                    connection.request("POST", _PREDICT,
                                       body=json.dumps({"instances": [sentence]}))
                    response = connection.getresponse()
                    answer = json.loads(response.read())
                    tree = answer["predictions"][0]["tree"] if response.status == 200 else None
                    if tree not in (f"(V1 {sentence})", f"(V2 {sentence})"):
                        failures.append((response.status, answer))
                    else:
                        roots_seen.append(tree[1:3])
                        roots_by_client[client_id].append(tree[1:3])
                    count += 1
                    stop.wait(0.01)  # back to back, but leaving the server a share of the CPU
            finally:
                connection.close()
            return failures, count

        with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
            # A request in flight on version 1 while version 2 arrives: it finishes there.
            # It is in its model call on version 1 before the clients start and version 2
            # is saved; its sleep leaves loading and warming up version 2 ample time, even
            # on a loaded machine.
            before = _metric_values(port)
            slow_sent_at = time.time()
            slow = pool.submit(lambda: (_http(port, "POST", _PREDICT, {
                "signature_name": "slow",
                "instances": [{"text": "t", "sleep_ms": slow_ms}]}), time.time()))
            _wait_for_metrics(port, _model_call_began(before), slow)
            clients = [pool.submit(run_client, i) for i in range(4)]
            _save_toy_version(base, 2, "V2")
            deadline = time.monotonic() + 60
            while "V2" not in roots_seen[-5:] and time.monotonic() < deadline:
                time.sleep(0.2)
            # A broken version 3: logged, and version 2 keeps serving.
            (base / "3").mkdir()
            (base / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")
            deadline = time.monotonic() + 30
            while "failed to load version 3" not in log_path.read_text() and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(0.5)
            stop.set()
            results = [client.result(timeout=60) for client in clients]
            slow_answer, slow_answered_at = slow.result(timeout=60)
            assert slow_answer == (200, {"predictions": ["t"]})
        assert [f for failures, _ in results for f in failures] == []
        assert all(count > 0 for _, count in results)
        assert roots_seen[0] == "V1" and roots_seen[-1] == "V2"
        # Once a client saw version 2, it never saw version 1 again. (Across clients, a
        # request that started on version 1 may still finish after another's version 2.)
        for roots in roots_by_client.values():
            if "V2" in roots:
                assert "V1" not in roots[roots.index("V2"):]
        # Highest first, as TF Serving: the broken version 3 (END), 2, then 1 (unloaded).
        versions = _http(port, "GET", f"/v1/models/{MODEL_NAME}")[1]["model_version_status"]
        assert [(v["version"], v["state"]) for v in versions] == [
            ("3", "END"), ("2", "AVAILABLE"), ("1", "END")]
        log = log_path.read_text()
        assert "failed to load version 3" in log
        # Version 2 took over while the slow request ran on version 1, and version 1 was
        # unloaded only after that request's model call had returned, i.e. at least its
        # slow_ms of sleep after it was sent. (Timestamps, not line order: access lines are
        # written by a background thread, so one can follow a line logged after it.)
        # The slow request's line may still be on the listener's queue when its answer
        # arrives, so it is waited for.
        def slow_line_logged():
            return any("POST" in line and "predict 200" in line and "batch=1" in line
                       and float(line.split()[-2].rstrip("ms")) >= slow_ms
                       for line in log_path.read_text().splitlines())

        # Version 1 is unloaded once that call has returned, so its line may come later
        # still: both are waited for.
        def unload_logged():
            return "unloaded version 1" in log_path.read_text()

        deadline = time.monotonic() + 30
        while not (slow_line_logged() and unload_logged()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert slow_line_logged() and unload_logged()
        lines = log_path.read_text().splitlines()

        def logged_at(text):
            return _absl_line_time(next(line for line in lines if text in line), slow_sent_at)

        assert logged_at("serving version 2") < slow_answered_at
        assert logged_at("unloaded version 1") >= slow_sent_at + slow_ms / 1000


@pytest.mark.server
def test_new_version_is_warmed_up_before_it_serves(tmp_path):
    """A new version runs each of its signatures once before new requests switch to it, as
    TF Serving's warm-up does, so that no request pays for a version's cold first calls
    (the real export's: ~276 ms against ~13 ms steady). Counted, not timed: with no
    request in flight, the model calls the server makes between the new version's arrival
    and the switch are its warm-up."""
    base = tmp_path / "models" / MODEL_NAME
    base.mkdir(parents=True)
    _save_toy_version(base, 1, "V1")
    with _running_server(base, MODEL_NAME, tmp_path / "server.log",
                         "--file_system_poll_wait_seconds=0.2") as port:
        status, answer = _http(port, "POST", _PREDICT, {"instances": ["one"]})
        assert (status, answer["predictions"][0]["tree"]) == (200, "(V1 one)")
        before = _metric_values(port)
        _save_toy_version(base, 2, "V2")
        at_switch = _wait_for_metrics(
            port, lambda now: now["tetra_serving_model_version"] == 2)
        # One scrape holds both: the switch, and the model calls made before it, one per
        # signature of version 2 (serving_default and slow: `_save_toy_version`).
        assert _metric_delta(before, at_switch,
                             "tetra_serving_model_call_seconds_count") == 2
        status, answer = _http(port, "POST", _PREDICT, {"instances": ["two"]})
        assert (status, answer["predictions"][0]["tree"]) == (200, "(V2 two)")
        # The first request on version 2 made its own model call and no other.
        assert _metric_delta(at_switch, _metric_values(port),
                             "tetra_serving_model_call_seconds_count") == 1


@pytest.mark.server
def test_limits_come_from_the_export_and_flags_only_lower_them(tmp_path):
    """assets.extra/limits.json's max_pieces_per_call bounds a sentence (each word is at
    least one piece) even with a higher --max_pieces_per_request."""
    from tetra_tf.contract import sentences

    base = tmp_path / "models" / MODEL_NAME
    base.mkdir(parents=True)
    _save_toy_version(base, 1, "S")
    (base / "1" / "assets.extra").mkdir()
    (base / "1" / "assets.extra" / "limits.json").write_text(json.dumps(
        {"max_pieces_per_word": 8, "max_pieces_per_call": 5,
         "max_window_positions_per_call": 2560}))
    with _running_server(base, MODEL_NAME, tmp_path / "server.log",
                         "--max_pieces_per_request=1000") as port:
        assert _http(port, "POST", _PREDICT, {"instances": ["a b c d e"]})[0] == 200
        status, body = _http(port, "POST", _PREDICT, {"instances": ["a b c d e f"]})
    assert status == 400 and body["error"].startswith("sentence 0: too_many_pieces: "), body
    assert sentences.reason_in(body["error"]) == sentences.TOO_MANY_PIECES


# ----------------------------------------------------------------------------------------
# The real export (tetra_tf/export.py) of a tiny random model, served and parsed over REST.


@pytest.fixture(scope="module")
def tetra_export(tiny_export_dir):
    """The shared tiny random tagger's export, as a base path holding version 1."""
    return pathlib.Path(tiny_export_dir).parent


MAX_PIECES = 200  # The real export's server: a low --max_pieces_per_request.


@pytest.mark.server
def test_real_export_over_rest_matches_parser(tetra_export, tmp_path):
    import nltk

    from tetra_tf.parser import Parser

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import tiny_model

    word_lists = [nltk.Tree.fromstring(tree).leaves() for tree in tiny_model.TREES]
    word_lists += [["Büro", "ünïcode", "東京", "?"], ["x"] * 40]
    expected = {}

    def parse_in_process():
        parser = Parser(str(tetra_export / "1"))
        expected["strings"] = [result.bracketed for result in parser.parse_each(word_lists, 64)]
        expected["trees"] = parser.parse_sents(word_lists)

    grpc_port = free_port()
    with _running_server(tetra_export, "tetra", tmp_path / "server.log",
                         f"--max_pieces_per_request={MAX_PIECES}",
                         while_starting=parse_in_process, grpc_port=grpc_port) as port:
        expected_strings, expected_trees = expected["strings"], expected["trees"]
        address = f"http://127.0.0.1:{port}"
        trees = serving_client.parse([" ".join(words) for words in word_lists],
                                     server=address, model_name="tetra", batch_size=4,
                                     timeout_s=HTTP_TIMEOUT_S)
        assert trees == expected_strings
        assert [nltk.Tree.fromstring(tree) for tree in trees] == expected_trees

        status, body = _http(port, "GET", "/v1/models/tetra/metadata")
        assert status == 200
        default = body["metadata"]["signature_def"]["signature_def"]["serving_default"]
        assert {n: i["dtype"] for n, i in default["inputs"].items()} == {
            "sentences": "DT_STRING"}
        outputs = {n: i["dtype"] for n, i in default["outputs"].items()}
        for name, dtype in [("num_words", "DT_INT32"), ("words", "DT_STRING"),
                            ("leaf_tag_ids", "DT_INT32"), ("internal_tag_ids", "DT_INT32"),
                            ("leaf_tags", "DT_STRING"), ("internal_tags", "DT_STRING"),
                            ("pos_tags", "DT_STRING"), ("score", "DT_FLOAT"),
                            ("tree", "DT_STRING")]:
            assert outputs.get(name) == dtype, name

        # TF Serving's gRPC API, with the official client code: the same trees.
        import grpc
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "tetra"
        request.model_spec.signature_name = "serving_default"
        request.inputs["sentences"].CopyFrom(
            tf.make_tensor_proto([" ".join(words) for words in word_lists]))
        result = stub.Predict(request, 30.0)
        channel.close()
        grpc_trees = [t.decode("utf-8") for t in tf.make_ndarray(result.outputs["tree"])]
        assert grpc_trees == trees

        # Columnar request: the same trees, and words/num_words echo the input.
        sentences = [" ".join(words) for words in word_lists[:3]]
        status, body = _http(port, "POST", "/v1/models/tetra:predict", {"inputs": sentences})
        assert status == 200, body
        assert body["outputs"]["tree"] == expected_strings[:3]
        assert body["outputs"]["num_words"] == [len(words) for words in word_lists[:3]]

        # The checks in front of the model: a 10,000-word sentence, an empty one, and
        # parse_words rows with an empty word, all rejected (a hang fails by HTTP_TIMEOUT_S).
        for request in [{"instances": [" ".join(["word"] * 10_000)]},
                        {"instances": ["ok", " "]},
                        {"signature_name": "parse_words",
                         "instances": [{"words": ["a", ""], "num_words": 2}]}]:
            status, body = _http(port, "POST", "/v1/models/tetra:predict", request)
            assert status == 400 and list(body) == ["error"], body
        # Subword pieces are counted before the model runs: "!" * 20 is 20 pieces, of which
        # the graph keeps 8 (tokenization.MAX_PIECES_PER_WORD), so 25 such words are 200
        # pieces (allowed) and 26 are 208 (400), although both are far under the word limits.
        from tetra_tf.data import tokenization

        assert tokenization.MAX_PIECES_PER_WORD * 25 == MAX_PIECES
        for num_words, expected_status in [(25, 200), (26, 400)]:
            status, body = _http(port, "POST", "/v1/models/tetra:predict",
                                 {"instances": [" ".join(["!" * 20] * num_words)]})
            assert status == expected_status, body
            if status == 400:
                assert "208 subword pieces" in body["error"], body
        # Over several sentences of one request, and through parse_words.
        status, body = _http(port, "POST", "/v1/models/tetra:predict", {
            "signature_name": "parse_words",
            "instances": [{"words": ["abc!!!!!!!!!!"] * 13, "num_words": 13}] * 2})
        assert status == 400 and "pieces" in body["error"], body


# ----------------------------------------------------------------------------------------
# Hostile clients (issue 23).


def _rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def _grpc_code(call, request):
    import grpc

    with pytest.raises(grpc.RpcError) as error:
        call(request, HTTP_TIMEOUT_S)
    return error.value.code(), error.value.details()


@pytest.mark.parametrize("signature, name, dims", [
    ("serving_default", "sentences", [100_000_000]),
    ("serving_default", "sentences", [4_000_000, 25]),
    ("parse_words", "words", [1, 100_000_000]),
])
def test_huge_declared_shape_is_refused_before_any_tensor(batching_server, signature, name,
                                                          dims):
    """A few bytes declaring 10^8 values (tf.make_ndarray would expand them: 635 MiB)."""
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    port, _, grpc_port = batching_server
    pid = SERVER_PIDS[port]
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL_NAME
    request.model_spec.signature_name = signature
    tensor = request.inputs[name]
    tensor.CopyFrom(tf.make_tensor_proto(["x"]))
    tensor.tensor_shape.Clear()
    for size in dims:
        tensor.tensor_shape.dim.add(size=size)
    if signature == "parse_words":
        request.inputs["num_words"].CopyFrom(tf.make_tensor_proto([1], dtype=tf.int32))
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        _grpc_code(stub.Predict, predict_pb2.PredictRequest())  # Connected first.
        before, calls_before = _rss_mib(pid), _metric_values(port)
        code, details = _grpc_code(stub.Predict, request)
        grown = _rss_mib(pid) - before
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "declares" in details, details
    # Refused on its declared shape: no array was built (memory), no model call made.
    assert grown < 10, grown
    assert _metric_delta(calls_before, _metric_values(port),
                         "tetra_serving_model_call_seconds_count") == 0


def test_rest_declared_rows_are_refused_before_any_array(batching_server):
    port = batching_server[0]
    before, calls_before = _rss_mib(SERVER_PIDS[port]), _metric_values(port)
    status, body = _http(port, "POST", _PREDICT, {"inputs": {"sentences": ["a"] * 150_000}})
    assert status == 400 and "declares 150000 rows, more than --max_batch_size=32" in \
        body["error"], body
    assert _rss_mib(SERVER_PIDS[port]) - before < 10
    assert _metric_delta(calls_before, _metric_values(port),
                         "tetra_serving_model_call_seconds_count") == 0


def test_refused_sentence_carries_its_reason_over_rest_and_grpc(batching_server):
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from tetra_tf.contract import sentences

    port, _, grpc_port = batching_server
    status, body = _http(port, "POST", _PREDICT, {"instances": ["ok", "\u3000\u2029"]})
    assert status == 400 and body["error"].startswith("sentence 1: empty: "), body
    request = predict_pb2.PredictRequest()
    request.model_spec.name = MODEL_NAME
    request.inputs["sentences"].CopyFrom(
        tf.make_tensor_proto(np.array([b"ok", b"caf\xe9"], dtype=object)))
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        code, details = _grpc_code(stub.Predict, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("sentence 1: ") and sentences.reason_in(details) == "not_utf8"


def test_refused_calls_are_counted_and_logged_in_one_line(batching_server):
    """REST's 413, gRPC's oversized (RESOURCE_EXHAUSTED) and undecodable (INTERNAL)
    messages, Classify and Regress on predict signatures (INVALID_ARGUMENT, as TF Serving)
    and MultiInference's predict task (UNIMPLEMENTED): each counted, each one log line; and
    a negative version is NOT_FOUND."""
    import grpc
    from tensorflow_serving.apis import (classification_pb2, inference_pb2, predict_pb2,
                                         prediction_service_pb2_grpc, regression_pb2)

    port, log_path, grpc_port = batching_server
    before = _metric_values(port)
    status, _ = _http(port, "POST", _PREDICT, {"instances": ["x" * (1 << 20)]})
    assert status == 413
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        big = predict_pb2.PredictRequest()
        big.model_spec.name = MODEL_NAME
        big.inputs["sentences"].CopyFrom(tf.make_tensor_proto(["x" * (1 << 20)]))
        assert _grpc_code(stub.Predict, big)[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
        raw = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
        assert _grpc_code(raw, b"\xff\xff\xff")[0] == grpc.StatusCode.INTERNAL
        spec = {"model_spec": {"name": MODEL_NAME}}
        for call, request, code in [
                (stub.Classify, classification_pb2.ClassificationRequest(**spec),
                 grpc.StatusCode.INVALID_ARGUMENT),
                (stub.Regress, regression_pb2.RegressionRequest(**spec),
                 grpc.StatusCode.INVALID_ARGUMENT),
                (stub.MultiInference, inference_pb2.MultiInferenceRequest(tasks=[dict(
                    spec, method_name="tensorflow/serving/predict")]),
                 grpc.StatusCode.UNIMPLEMENTED)]:
            assert _grpc_code(call, request)[0] == code
        negative = predict_pb2.PredictRequest()
        negative.model_spec.name = MODEL_NAME
        negative.model_spec.version.value = -1
        negative.inputs["sentences"].CopyFrom(tf.make_tensor_proto(["a"]))
        assert _grpc_code(stub.Predict, negative)[0] == grpc.StatusCode.NOT_FOUND
    after = _metric_values(port)
    for api, method, code in [("rest", "predict", "RESOURCE_EXHAUSTED"),
                              ("grpc", "predict", "RESOURCE_EXHAUSTED"),
                              ("grpc", "predict", "INTERNAL"),
                              ("grpc", "classify", "INVALID_ARGUMENT"),
                              ("grpc", "regress", "INVALID_ARGUMENT"),
                              ("grpc", "multi_inference", "UNIMPLEMENTED"),
                              ("grpc", "predict", "NOT_FOUND")]:
        name = f'tetra_serving_requests_total{{api="{api}",method="{method}",status="{code}"}}'
        assert _metric_delta(before, after, name) == 1, name
    deadline = time.monotonic() + 10
    while "multi_inference" not in log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    log = log_path.read_text()
    assert "Traceback" not in log and "Exception" not in log
    for method, code in [("predict", "INTERNAL"), ("classify", "INVALID_ARGUMENT"),
                         ("regress", "INVALID_ARGUMENT"), ("multi_inference", "UNIMPLEMENTED")]:
        assert len([line for line in log.splitlines()
                    if f" grpc {method} {code} " in line]) == 1, (method, code)
