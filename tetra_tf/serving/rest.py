"""The REST front end: TF Serving's HTTP/JSON API, a plain WSGI app served by waitress.

waitress (a production WSGI server) owns the sockets: it reads each request body whole and
within --max_request_bytes before a worker thread runs the app, and answers an oversized
body with 413 itself (counted in the metrics here). The app (`RestApp`) routes TF
Serving's few paths, fills a `PredictRequest` for the one predict path (predictor.py), and
answers in TF Serving's JSON. It is plain WSGI, not a web framework: the request is a
small, fixed set of paths, and under load every millisecond of CPU a request costs in
Python is taken from the model (measured in serving/README.md, "Load test").

This module is the front end only: `create_rest_server` builds the waitress server for an
app; running and stopping it (signals, graceful shutdown) is main.py's.
"""

from __future__ import annotations

import http
import json
import logging
import re
import socket
import time
import traceback
from typing import Any, Callable, Iterable

from absl import logging as absl_logging

from tetra_tf import export_format
from tetra_tf.serving import codecs
from tetra_tf.serving.errors import STATUS_CODES, RequestError, log_safe
from tetra_tf.serving.manager import parse_version
from tetra_tf.serving.metrics import Metrics
from tetra_tf.serving.predictor import PredictRequest, Predictor


_PREDICT_PATH = re.compile(r"/v1/models/([^/:]+)(?:/versions/(\d+))?:(classify|regress|predict)",
                           re.IGNORECASE)
_METADATA_PATH = re.compile(r"/v1/models/([^/:]+)(?:/versions/(\d+))?/metadata", re.IGNORECASE)
_STATUS_PATH = re.compile(r"/v1/models(?:/([^/:]+))?(?:/versions/(\d+))?", re.IGNORECASE)
METRICS_PATH = "/monitoring/prometheus/metrics"
JSON_CONTENT_TYPE = "application/json"


def _rest_method(path: str) -> str:
    """The metrics' method label for a REST path."""
    if _PREDICT_PATH.fullmatch(path):
        return "predict"
    if _METADATA_PATH.fullmatch(path):
        return "metadata"
    if _STATUS_PATH.fullmatch(path):
        return "status"
    return "metrics" if path == METRICS_PATH else "other"


class _MethodNotAllowed(RequestError):
    """405, with the method the path takes (the answer's Allow header)."""

    def __init__(self, method: str, allowed: str) -> None:
        super().__init__(f"Malformed request: {log_safe(method, 20)} is not allowed here, "
                         f"use {allowed}", 405)
        self.allowed = allowed


def _require_method(method: str, allowed: str) -> None:
    if method != allowed and not (method == "HEAD" and allowed == "GET"):
        raise _MethodNotAllowed(method, allowed)


def _json_body(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False, indent=None).encode("utf-8")


def _request_path(environ: dict[str, Any]) -> str:
    """The request's path as text: WSGI's PATH_INFO (percent-decoded bytes carried as
    latin-1) decoded as UTF-8, undecodable bytes replaced."""
    raw = environ.get("PATH_INFO") or "/"
    try:
        return raw.encode("latin-1").decode("utf-8", errors="replace")
    except UnicodeEncodeError:  # Not a WSGI server's str: take it as it is.
        return raw


class RestApp:
    """TF Serving's REST paths and JSON answers for one predictor, as a WSGI app.

    Every answer is JSON (errors as {"error": ...}) except the Prometheus metrics; each
    request is logged in one line and counted in the metrics.
    """

    def __init__(self, predictor: Predictor, max_request_bytes: int = 1 << 20,
                 metrics: Metrics | None = None,
                 log_request: Callable[..., None] = absl_logging.info) -> None:
        """Args:
          log_request: logs a request's line (format, *args), e.g. `AccessLog.info`.
        """
        self.predictor = predictor
        self.max_request_bytes = max_request_bytes
        self._metrics = metrics
        self._log_request = log_request

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        path = _request_path(environ)
        headers: list[tuple[str, str]] = []
        batch_size = None
        try:
            status, body, content_type, batch_size = self._route(method, path, environ)
        except RequestError as error:
            status, body, content_type = error.status, _json_body({"error": str(error)}), \
                JSON_CONTENT_TYPE
            if isinstance(error, _MethodNotAllowed):
                headers.append(("Allow", error.allowed))
        except Exception as error:  # noqa: BLE001 - a bug answers 500, never a traceback.
            absl_logging.error("internal error:\n%s", traceback.format_exc())
            status, body, content_type = 500, _json_body(
                {"error": f"Internal: {type(error).__name__}: {error}"}), JSON_CONTENT_TYPE
        headers[:0] = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        start_response(f"{status} {_reason(status)}", headers)
        elapsed_s = time.perf_counter() - started
        # The path is request data: escaped, so that it cannot forge log lines.
        self._log_request("%s %s %s %d %.1fms%s", environ.get("REMOTE_ADDR"),
                          log_safe(method, 20), log_safe(path), status, elapsed_s * 1e3,
                          f" batch={batch_size}" if batch_size is not None else "")
        if self._metrics is not None:
            self._metrics.observe("rest", _rest_method(path),
                                  STATUS_CODES.get(status, str(status)), elapsed_s)
        return [b"" if method == "HEAD" else body]

    def _route(self, method: str, path: str, environ: dict[str, Any]
               ) -> tuple[int, bytes, str, int | None]:
        """(status, body, content type, batch size or None) for one request.

        Raises:
          RequestError: the request's error answer (404, 405, 400, ...).
        """
        manager = self.predictor.manager
        if path == METRICS_PATH and self._metrics is not None:
            _require_method(method, "GET")
            body, content_type = self._metrics.exposition()
            return 200, body, content_type, None
        match = _PREDICT_PATH.fullmatch(path)
        if match:
            _require_method(method, "POST")
            model_name, version, verb = match.groups()
            number = _version(version)
            if verb.lower() != "predict":
                with manager.acquire(model_name, number):
                    raise RequestError(f"Unimplemented: this server supports :predict only, "
                                       f"not :{verb}", 501)
            payload, batch_size = predict_json(self.predictor, model_name, number,
                                               self._read_body(environ))
            return 200, _json_body(payload), JSON_CONTENT_TYPE, batch_size
        match = _METADATA_PATH.fullmatch(path)
        if match:
            _require_method(method, "GET")
            model_name, version = match.groups()
            with manager.acquire(model_name, _version(version)) as model:
                return 200, _json_body(model.metadata_json()), JSON_CONTENT_TYPE, None
        match = _STATUS_PATH.fullmatch(path)
        if match:
            _require_method(method, "GET")
            model_name, version = match.groups()
            if not model_name:
                raise RequestError("Missing model name in request.")
            return (200, _json_body(manager.status_json(model_name, _version(version))),
                    JSON_CONTENT_TYPE, None)
        raise RequestError(f"Malformed request: {log_safe(method, 20)} {log_safe(path)} "
                           "(no such endpoint)", 404)

    def _read_body(self, environ: dict[str, Any]) -> bytes:
        """The request body, at most max_request_bytes (waitress has already refused longer
        ones; this bound holds under any WSGI server)."""
        too_large = RequestError(
            f"Request body is larger than --max_request_bytes={self.max_request_bytes}", 413)
        try:
            length = int(environ.get("CONTENT_LENGTH") or -1)
        except ValueError:
            raise RequestError("Malformed request: bad Content-Length") from None
        stream = environ["wsgi.input"]
        if length > self.max_request_bytes:
            raise too_large
        if length >= 0:
            return stream.read(length)
        if not environ.get("wsgi.input_terminated"):
            return b""  # No length and no end of input marked: WSGI's safe reading.
        body = stream.read(self.max_request_bytes + 1)
        if len(body) > self.max_request_bytes:
            raise too_large
        return body


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _version(text: str | None) -> int | None:
    return parse_version(text) if text is not None else None


def predict_json(predictor: Predictor, model_name: str, version: int | None, body: bytes
                 ) -> tuple[dict[str, Any], int]:
    """Runs a TF Serving REST predict body; returns (response JSON, batch size)."""
    request = codecs.parse_json_object(body)
    signature_name = request.get("signature_name", export_format.SERVING_SIGNATURE)
    if not isinstance(signature_name, str):
        raise RequestError("'signature_name' must be a string")
    row_format = []

    def decode(specs: dict[str, Any], limits: Any) -> dict[str, Any]:
        arrays, rows = codecs.request_inputs(request, specs, limits)
        row_format.append(rows)
        return arrays

    result = predictor.predict(PredictRequest(model_name, version, signature_name, decode))
    outputs, batch_size = result.outputs, result.batch_size
    if row_format[0]:
        return {"predictions": codecs.rows_json(outputs, batch_size)}, batch_size
    if len(outputs) == 1:
        return {"outputs": codecs.array_json(*next(iter(outputs.items())))}, batch_size
    return {"outputs": {name: codecs.array_json(name, value)
                        for name, value in outputs.items()}}, batch_size


def _json_error_task_class(metrics: Metrics | None) -> type:
    """waitress's ErrorTask answering {"error": ...} as JSON, like the app's own errors,
    and counting the refusal (e.g. 413) in the metrics."""
    from waitress import task as waitress_task

    class JsonErrorTask(waitress_task.ErrorTask):
        def execute(self) -> None:
            error = self.request.error
            message = f"{error.reason}: {error.body}"
            if error.code == 413:
                message = ("Request body is larger than --max_request_bytes="
                           f"{self.channel.server.adj.max_request_body_size - 1}")
            body = _json_body({"error": message})
            self.status = f"{error.code} {error.reason}"
            self.response_headers.extend([("Content-Type", "application/json"),
                                          ("Connection", "close")])
            self.set_close_on_finish()
            self.channel.linger_on_close = True
            self.content_length = len(body)
            self.write(body)
            if metrics is not None:
                metrics.count("rest", _rest_method(self.request.path or ""),
                              STATUS_CODES.get(error.code, str(error.code)))

    return JsonErrorTask


# After an error answer (e.g. 413 mid-body), the rest of the client's body is read and
# dropped for at most this long before the socket closes: closing with unread data sends a
# TCP reset, which makes the client lose the answer (Apache's "lingering close").
LINGER_AFTER_ERROR_S = 2.0


def _lingering_channel_class(base: type) -> type:
    """A waitress channel that half-closes after an error answer, then drains its input.

    Only a channel that starts lingering changes class (to `Lingering`), so that every
    other channel keeps waitress's own readable() and writable(): the event loop calls
    them for every connection on every turn.
    """

    class LingeringChannel(base):
        linger_on_close = False

        def handle_close(self) -> None:
            if self.linger_on_close and self.connected:
                try:
                    self.socket.shutdown(socket.SHUT_WR)  # the answer is sent; FIN follows
                except OSError:
                    return super().handle_close()
                self._linger_until = time.monotonic() + LINGER_AFTER_ERROR_S
                self.will_close = self.close_when_flushed = False
                self.__class__ = _lingering_class(type(self))
                return None
            return super().handle_close()

    return LingeringChannel


_LINGERING_CLASSES: dict[type, type] = {}


def _lingering_class(channel_class: type) -> type:
    """channel_class as it behaves while lingering: it reads (and drops) until the peer
    closes or the time is up, and writes only to close when waitress's maintenance says
    so."""
    lingering = _LINGERING_CLASSES.get(channel_class)
    if lingering is None:
        def readable(self) -> bool:
            return True

        def writable(self) -> bool:
            return bool(self.will_close)

        def handle_read(self) -> None:
            try:
                data = self.socket.recv(1 << 16)
            except OSError:
                data = b""
            if not data or time.monotonic() > self._linger_until:
                self.handle_close()

        def handle_close(self) -> None:
            self.linger_on_close = False  # Lingered: now close for good.
            channel_class.handle_close(self)

        lingering = _LINGERING_CLASSES[channel_class] = type(
            "Lingering" + channel_class.__name__, (channel_class,),
            {"readable": readable, "writable": writable, "handle_read": handle_read,
             "handle_close": handle_close})
    return lingering


def create_rest_server(app: Callable[..., Iterable[bytes]], host: str, port: int, *,
                       threads: int = 16, max_request_bytes: int = 1 << 20,
                       read_timeout_s: float = 30.0, metrics: Metrics | None = None) -> Any:
    """A waitress server for a WSGI app (a `RestApp`, or middleware around one) on
    host:port, bound but not yet running (main.py runs and stops it).

    waitress reads each request fully (Content-Length or chunked, at most
    max_request_bytes) before one of its `threads` worker threads runs the app, keeps
    HTTP/1.1 connections alive, and closes a connection silent for read_timeout_s (a
    stalled body included). Its own refusals (e.g. 413) are answered in JSON, counted in
    `metrics`, and followed by a lingering close.

    Raises:
      OSError: host:port cannot be bound.
    """
    import waitress
    from waitress import channel as waitress_channel

    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "Task queue depth" notes.
    server = waitress.create_server(
        app, host=host, port=port, threads=threads, ident="tetra-serving",
        # waitress rejects bodies of max_request_body_size bytes or more: one over ours.
        max_request_body_size=max_request_bytes + 1, channel_timeout=read_timeout_s,
        cleanup_interval=max(0.5, min(30.0, read_timeout_s / 4)), connection_limit=1000,
        clear_untrusted_proxy_headers=True)

    class JsonErrorChannel(_lingering_channel_class(waitress_channel.HTTPChannel)):
        error_task_class = _json_error_task_class(metrics)

    server.channel_class = JsonErrorChannel
    return server
