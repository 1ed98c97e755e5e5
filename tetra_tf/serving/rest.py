"""The REST front end: TF Serving's HTTP/JSON API, a plain WSGI app served by waitress.

waitress (a production WSGI server) owns the sockets: it reads each request body whole and
within --max_request_bytes before a worker thread runs the app, and answers an oversized
body with 413 itself (counted in the metrics here). The app (`RestApp`) routes TF
Serving's few paths, fills a `PredictRequest` for the one predict path (predictor.py), and
answers in TF Serving's JSON. It is plain WSGI, not a web framework: the request is a
small, fixed set of paths, and under load every millisecond of CPU a request costs in
Python is taken from the model (measured: docs/benchmarks.md, "Serving under load").

Answers are TF Serving's where it answers: any /v1/ request it cannot route (a wrong method
included) is 400 "Malformed request: METHOD PATH", and :classify/:regress get TF Serving's 400
for a signature that is not a classification/regression one. Metrics are served at
`metrics_path` (TF Serving's path by default; main.py's --monitoring_config_file).

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
from typing import Any, Callable, Iterable, NoReturn

from absl import logging as absl_logging

from tetra_tf.contract import export_format
from tetra_tf.serving import codecs
from tetra_tf.serving.errors import STATUS_CODES, RequestError, inference_refusal, log_safe
from tetra_tf.serving.manager import ModelManager, VersionChoice, VersionLabel, parse_version
from tetra_tf.serving.metrics import DEFAULT_METRICS_PATH, Metrics
from tetra_tf.serving.page import ParsePage
from tetra_tf.serving.predictor import PredictRequest, Predictor


# TF Serving's paths: a model, then /versions/N, /labels/LABEL or neither (the latest).
_VERSION = r"(/versions/\d+|/labels/[^/:]+)?"
_PREDICT_PATH = re.compile(rf"/v1/models/([^/:]+){_VERSION}:(classify|regress|predict)",
                           re.IGNORECASE)
_METADATA_PATH = re.compile(rf"/v1/models/([^/:]+){_VERSION}/metadata", re.IGNORECASE)
_STATUS_PATH = re.compile(rf"/v1/models(?:/([^/:]+))?{_VERSION}", re.IGNORECASE)
METRICS_PATH = DEFAULT_METRICS_PATH
JSON_CONTENT_TYPE = "application/json"
_GET = ("GET", "HEAD")  # HEAD: a GET's answer without its body.


def _describe(path: str, metrics_path: str | None = None) -> tuple[str, str | None]:
    """The metrics' labels for a REST path: (method, e.g. predict, classify, metadata,
    status; model name for TF Serving's metrics, "" if the path names none, None outside
    /v1/, which TF Serving does not count)."""
    for pattern, method in ((_PREDICT_PATH, None), (_METADATA_PATH, "metadata"),
                            (_STATUS_PATH, "status")):
        match = pattern.fullmatch(path)
        if match:
            return method or match.group(3).lower(), match.group(1) or ""
    if path == metrics_path:
        return "metrics", None
    return "other", "" if path.lower().startswith("/v1/") else None


def _malformed(method: str, path: str) -> RequestError:
    """TF Serving's answer to a /v1/ request it cannot route, a wrong method included."""
    return RequestError(f"Malformed request: {log_safe(method, 20)} {log_safe(path)}")


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
                 log_request: Callable[..., None] = absl_logging.info,
                 metrics_path: str | None = DEFAULT_METRICS_PATH,
                 page: ParsePage | None = None) -> None:
        """Args:
          log_request: logs a request's line (format, *args), e.g. `AccessLog.info`.
          metrics_path: where `metrics` are served; None: nowhere.
          page: the parse page to serve (`tetra_tf.serving.page`: ``/`` and ``/page/``);
            None: none (those paths answer 404).
        """
        self.page = page
        self.predictor = predictor
        self.max_request_bytes = max_request_bytes
        self._metrics = metrics
        self._log_request = log_request
        self.metrics_path = metrics_path if metrics is not None else None

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        started = time.perf_counter()
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        path = _request_path(environ)
        batch_size = None
        headers: list[tuple[str, str]] = []
        try:
            page_answer = (self.page.answer(method, path, lambda: self._read_body(environ))
                           if self.page is not None else None)
            if page_answer is not None:
                status, body, content_type, headers = page_answer
            else:
                status, body, content_type, batch_size = self._route(method, path, environ)
        except RequestError as error:
            status, body, content_type = error.status, _json_body({"error": str(error)}), \
                JSON_CONTENT_TYPE
        except Exception as error:  # noqa: BLE001 - a bug answers 500, never a traceback.
            absl_logging.error("internal error:\n%s", traceback.format_exc())
            status, body, content_type = 500, _json_body(
                {"error": f"Internal: {type(error).__name__}: {error}"}), JSON_CONTENT_TYPE
        start_response(f"{status} {_reason(status)}", [("Content-Type", content_type),
                                                       ("Content-Length", str(len(body))),
                                                       *headers])
        elapsed_s = time.perf_counter() - started
        # The path is request data: escaped, so that it cannot forge log lines.
        self._log_request("%s %s %s %d %.1fms%s", environ.get("REMOTE_ADDR"),
                          log_safe(method, 20), log_safe(path), status, elapsed_s * 1e3,
                          f" batch={batch_size}" if batch_size is not None else "")
        if self._metrics is not None:
            label, model_name = _describe(path, self.metrics_path)
            self._metrics.observe("rest", label, STATUS_CODES.get(status, str(status)),
                                  elapsed_s, model_name)
        return [b"" if method == "HEAD" else body]

    def _route(self, method: str, path: str, environ: dict[str, Any]
               ) -> tuple[int, bytes, str, int | None]:
        """(status, body, content type, batch size or None) for one request.

        Raises:
          RequestError: the request's error answer (400, 404, ...).
        """
        manager = self.predictor.manager
        if path == self.metrics_path and self._metrics is not None:
            if method not in _GET:
                raise _malformed(method, path)
            body, content_type = self._metrics.exposition()
            return 200, body, content_type, None
        if not path.lower().startswith("/v1/"):
            raise RequestError(f"Malformed request: {log_safe(method, 20)} {log_safe(path)} "
                               "(no such endpoint)", 404)
        match = _PREDICT_PATH.fullmatch(path)
        if match and method == "POST":
            model_name, version, verb = match.groups()
            number = _version(version)
            body = self._read_body(environ)
            if verb.lower() != "predict":
                refuse_inference_json(manager, model_name, number, verb.lower(), body)
            payload, batch_size = predict_json(self.predictor, model_name, number, body)
            return 200, _json_body(payload), JSON_CONTENT_TYPE, batch_size
        match = _METADATA_PATH.fullmatch(path)
        if match and method in _GET:
            model_name, version = match.groups()
            with manager.acquire(model_name, _version(version)) as model:
                return 200, _json_body(model.metadata_json()), JSON_CONTENT_TYPE, None
        match = _STATUS_PATH.fullmatch(path)
        if match and method in _GET:
            model_name, version = match.groups()
            if not model_name:
                raise RequestError("Missing model name in request.")
            return (200, _json_body(manager.status_json(model_name, _version(version))),
                    JSON_CONTENT_TYPE, None)
        raise _malformed(method, path)

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


def _version(part: str | None) -> VersionChoice:
    """A path's version choice from its "/versions/N" or "/labels/LABEL" (None: the
    latest version)."""
    if not part:
        return None
    kind, _, value = part[1:].partition("/")
    return VersionLabel(value) if kind.lower() == "labels" else parse_version(value)


def _signature_name(request: dict[str, Any]) -> str:
    signature_name = request.get("signature_name", export_format.SERVING_SIGNATURE)
    if not isinstance(signature_name, str):
        raise RequestError("'signature_name' must be a string")
    return signature_name


def refuse_inference_json(manager: ModelManager, model_name: str, version: VersionChoice,
                          method: str, body: bytes) -> NoReturn:
    """Answers a TF Serving REST :classify or :regress body (method "classify" or
    "regress"), as TF Serving does for a model without such signatures: the body is parsed
    first (400), then the model looked up (404), then the signature (400; 501 for a real
    classification or regression signature, which this server does not run).

    Raises:
      RequestError: always.
    """
    signature_name = _signature_name(codecs.parse_json_object(body))
    with manager.acquire(model_name, version) as model:
        raise inference_refusal(method, signature_name, model.signature_defs)


def predict_json(predictor: Predictor, model_name: str, version: VersionChoice, body: bytes
                 ) -> tuple[dict[str, Any], int]:
    """Runs a TF Serving REST predict body; returns (response JSON, batch size)."""
    request = codecs.parse_json_object(body)
    signature_name = _signature_name(request)
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
                label, model_name = _describe(self.request.path or "")
                metrics.observe("rest", label, STATUS_CODES.get(error.code, str(error.code)),
                                None, model_name)

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
