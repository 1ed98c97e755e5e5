"""The server's command line and process: flags (TF Serving's names), start-up, serving
until a signal, graceful shutdown.

This module owns the process: TensorFlow's thread pools (sized through
`tetra_tf.cpu.share_cores`, from the --tensorflow_*_parallelism flags), the gRPC server's
thread pool, starting the REST (rest.py) and gRPC (grpc_api.py) servers, signal handling,
and the shutdown that waits for requests in progress. The front ends only build their
servers.

Exit codes (tetra_tf.cli): 0 after a clean shutdown (SIGINT or SIGTERM); 2 for a usage or
input error (bad flags, a bad batching parameters, monitoring or model config file, no
servable version under a model's base path); 1 for any other failure (a model fails to load,
the port is taken).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from concurrent import futures
from typing import Any, Callable, Iterable

if __name__ == "__main__":  # the program: TensorFlow's C++ start-up notices off, before it loads
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
from absl import logging as absl_logging  # noqa: E402

from tetra_tf import cli, cpu, extras, packaged_models  # noqa: E402
from tetra_tf.contract import export_format  # noqa: E402
from tetra_tf.errors import InputError, TetraError  # noqa: E402
from tetra_tf.serving import batching, model_config  # noqa: E402
from tetra_tf.serving.admission import Limits  # noqa: E402
from tetra_tf.serving.errors import first_line  # noqa: E402
from tetra_tf.serving.grpc_api import create_grpc_server  # noqa: E402
from tetra_tf.serving.manager import Models, versions_on_disk  # noqa: E402
from tetra_tf.serving.metrics import (DEFAULT_METRICS_PATH, AccessLog, Metrics,  # noqa: E402
                                      read_monitoring_config)
from tetra_tf.serving.page import ParsePage  # noqa: E402
from tetra_tf.serving.predictor import Predictor  # noqa: E402
from tetra_tf.serving.rest import RestApp, create_rest_server  # noqa: E402
from tetra_tf.serving.runners import BatchingRunner, DirectRunner  # noqa: E402
from tetra_tf.serving.servable import ServedModel  # noqa: E402

# The flags belong to the program that runs `run` (serving/server.py, or this module as
# `python -m tetra_tf.serving.main`), for its --help.
if __name__ != "__main__":
    flags.disclaim_key_flags()


def _define_flags() -> None:
    flags.DEFINE_string("model_base_path", None,
                        "Directory with numbered SavedModel versions (BASE/1/saved_model.pb); "
                        "the highest version is served; or the name of a model packaged with "
                        f"tetra-tf (default: {packaged_models.DEFAULT_MODEL}). Not with "
                        "--model_config_file.")
    flags.DEFINE_string("model_name", "tetra", "Model name in the request paths. Not with "
                        "--model_config_file.")
    flags.DEFINE_string("model_config_file", None,
                        "TF Serving's ModelServerConfig in text format (see "
                        "serving/models.config): the models to serve, each with its name, "
                        "absolute base_path, model_platform \"tensorflow\", "
                        "model_version_policy (latest, all or specific versions) and "
                        "version_labels. Instead of --model_name and --model_base_path.")
    flags.DEFINE_float("model_config_file_poll_wait_seconds", 0.0,
                       "Read --model_config_file again this often and serve what it lists "
                       "when it changes (TF Serving's flag); 0: read it once, at start.",
                       lower_bound=0.0)
    flags.DEFINE_bool("allow_version_labels_for_unavailable_models", False,
                      "Let a new version label name a version that is not loaded yet, e.g. "
                      "in the config read at start (TF Serving's flag); a label already in "
                      "use can only move to an available version.")
    flags.DEFINE_integer("rest_api_port", 8501, "HTTP port (0: pick a free one, logged).",
                         lower_bound=0, upper_bound=65535)
    flags.DEFINE_string("rest_api_host", "127.0.0.1",
                        "Address to bind (REST and gRPC); the default accepts local "
                        "connections only.")
    flags.DEFINE_integer("port", 8500, "gRPC port for TF Serving's PredictionService and "
                         "ModelService (0: pick a free one, logged).", lower_bound=0,
                         upper_bound=65535)
    flags.DEFINE_integer("max_request_bytes", 1 << 20,
                         "Larger request bodies get HTTP 413.", lower_bound=1)
    flags.DEFINE_integer("max_batch_size", 64, "Most instances (or batch rows) per request.",
                         lower_bound=1)
    flags.DEFINE_integer("max_words_per_sentence", 0,
                         "Longer sentences get HTTP 400 before the model runs; 0: no limit "
                         "beyond the export's subword pieces. Can only lower the export's "
                         "limits.", lower_bound=0)
    flags.DEFINE_integer("max_words_per_request", 16384,
                         "Most words in all sentences of one request.", lower_bound=1)
    flags.DEFINE_list("sentence_inputs", [export_format.SENTENCES_INPUT],
                      "String inputs checked as sentences (tetra_tf.contract.sentences: valid "
                      "UTF-8, 1 to --max_words_per_sentence whitespace-separated words).")
    flags.DEFINE_list("word_inputs", [export_format.WORDS_INPUT],
                      "String inputs [batch, width] checked as pre-split sentences (width at "
                      "most --max_words_per_sentence; with a "
                      f"'{export_format.NUM_WORDS_INPUT}' input, its first num_words entries "
                      "per row are non-empty words without spaces).")
    flags.DEFINE_list("text_inputs", [export_format.TEXT_INPUT],
                      "String inputs checked as raw texts: split into sentences and PTB "
                      "tokens as the export's parse_text signature splits them "
                      "(tetra_tf.contract.text), each sentence by the --sentence_inputs rules.")
    flags.DEFINE_integer("max_pieces_per_request", 0,
                         "Most WordPiece pieces in one request (a word counts at most the "
                         "export's max_pieces_per_word), counted with the export's own "
                         "vocabulary before the model runs; 0: the export's "
                         "max_pieces_per_call (assets.extra/limits.json). Can only lower "
                         "it.", lower_bound=0)
    flags.DEFINE_float("request_read_timeout_s", 30.0,
                       "A connection silent this long (a stalled request body, or an idle "
                       "keep-alive connection) is closed.", lower_bound=0.1)
    flags.DEFINE_integer("rest_api_num_threads", 64,
                         "Threads answering HTTP requests (each waits for its model call; "
                         "with batching, this bounds how many requests can be merged).",
                         lower_bound=1)
    flags.DEFINE_float("file_system_poll_wait_seconds", 1.0,
                       "Check --model_base_path this often for a new highest version, load "
                       "it and switch to it without a restart (TF Serving's flag); 0 or "
                       "less: never.")
    flags.DEFINE_bool("enable_batching", False,
                      "Merge concurrent predict requests into one model call (TF Serving's "
                      "flag), with --batching_parameters_file.")
    flags.DEFINE_string("batching_parameters_file", None,
                        "TF Serving's BatchingParameters in text format (max_batch_size, "
                        "batch_timeout_micros, max_enqueued_batches, num_batch_threads, "
                        "allowed_batch_sizes); TF Serving's defaults without it. See "
                        "serving/batching_parameters.txt.")
    flags.DEFINE_integer("max_concurrent_predictions", 1,
                         "Model calls run at once (others wait); 1 serializes them.",
                         lower_bound=1)
    flags.DEFINE_integer("tensorflow_intra_op_parallelism", 0,
                         "Threads that one TensorFlow op may use (TF Serving's flag); 0: "
                         "TensorFlow's default (the CPU count). With num_batch_threads 2, 1 "
                         "is faster on small CPUs: see serving/batching_parameters.txt.",
                         lower_bound=0)
    flags.DEFINE_integer("tensorflow_inter_op_parallelism", 0,
                         "Threads running independent TensorFlow ops (TF Serving's flag); "
                         "0: TensorFlow's default.", lower_bound=0)
    flags.DEFINE_string("monitoring_config_file", None,
                        "TF Serving's MonitoringConfig in text format, e.g. "
                        "'prometheus_config { enable: true, path: "
                        f"\"{DEFAULT_METRICS_PATH}\" }}': Prometheus metrics (TF "
                        "Serving's :tensorflow:serving:* and this server's tetra_serving_*) "
                        "on the REST port at that path, or none if not enabled. Without "
                        f"it, they are served at {DEFAULT_METRICS_PATH} (TF Serving serves "
                        "none). See serving/monitoring.config.")
    flags.DEFINE_bool("parse_page", False,
                      "Serve a page to try the parser in a browser at / on the REST port "
                      "(tetra_tf.serving.page: a text box, each sentence's drawn tree and "
                      "probabilities, through this REST API). Off by default: it lets any "
                      "visitor ask for drawings.")
    flags.DEFINE_float("shutdown_timeout_s", 30.0,
                       "On SIGINT/SIGTERM, wait this long for requests in progress.",
                       lower_bound=0.0)


def _check_port_free(host: str, port: int) -> None:
    """Fails fast (before the slow model load) when host:port cannot be bound.

    Raises:
      RuntimeError: the address is taken or cannot be bound (exit 1).
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # As the server does.
        try:
            sock.bind((host, port))
        except OSError as e:
            raise RuntimeError(f"cannot serve on {host}:{port}: {e.strerror or e}") from None


def main(argv: list[str]) -> int:
    extras.require("serving", "the tetra-tf server")
    flag_values = flags.FLAGS
    config = _model_server_config(flag_values)
    batching_params = None
    if flag_values.enable_batching:
        try:
            batching_params = (batching.read_batching_parameters(
                flag_values.batching_parameters_file)
                if flag_values.batching_parameters_file else batching.BatchingParameters())
        except batching.BatchingParametersError as e:
            raise cli.UsageError(f"--batching_parameters_file: {e}") from None
    elif flag_values.batching_parameters_file:
        raise cli.UsageError("--batching_parameters_file needs --enable_batching")
    metrics_path: str | None = DEFAULT_METRICS_PATH
    if flag_values.monitoring_config_file:
        try:
            metrics_path = read_monitoring_config(flag_values.monitoring_config_file)
        except InputError as e:
            raise cli.UsageError(f"--monitoring_config_file: {e}") from None
    for port in (flag_values.rest_api_port, flag_values.port):
        _check_port_free(flag_values.rest_api_host, port)
    metrics = Metrics()
    limits = Limits(max_batch_size=flag_values.max_batch_size,
                    max_words_per_sentence=flag_values.max_words_per_sentence,
                    max_words_per_request=flag_values.max_words_per_request,
                    sentence_inputs=tuple(flag_values.sentence_inputs),
                    word_inputs=tuple(flag_values.word_inputs),
                    text_inputs=tuple(flag_values.text_inputs),
                    max_pieces_per_request=flag_values.max_pieces_per_request)
    # With batching, each batch thread runs a model call: let that many run at once.
    model_slots = (batching_params.num_batch_threads if batching_params is not None
                   else flag_values.max_concurrent_predictions)
    _size_tensorflow_threads(model_slots, flag_values.tensorflow_intra_op_parallelism,
                             flag_values.tensorflow_inter_op_parallelism)

    def load(name: str, new_version: int, new_export_dir: str) -> ServedModel:
        with metrics.model_load(new_export_dir):
            return ServedModel(name, new_version, new_export_dir, limits, model_slots,
                               metrics.model_calls(name))

    runner: DirectRunner | BatchingRunner
    if batching_params is not None:
        runner = BatchingRunner(batching_params, limits.word_inputs, metrics)
        absl_logging.info("batching: %s", batching_params)
    else:
        runner = DirectRunner(metrics)
    manager = Models(load, on_unload=runner.unload,
                     on_switch=lambda m: metrics.model_version.set(m.version),
                     allow_version_labels_for_unavailable_models=(
                         flag_values.allow_version_labels_for_unavailable_models))
    _load_models(manager, config)
    if flag_values.file_system_poll_wait_seconds > 0:
        manager.watch(flag_values.file_system_poll_wait_seconds)
    if flag_values.model_config_file and flag_values.model_config_file_poll_wait_seconds > 0:
        manager.watch_config(flag_values.model_config_file,
                             flag_values.model_config_file_poll_wait_seconds)
    access_log = AccessLog()
    try:
        _serve(flag_values, Predictor(manager, runner), metrics, metrics_path, access_log)
    finally:
        access_log.stop()
    return cli.EXIT_OK


def _model_server_config(flag_values: Any) -> Any:
    """The ModelServerConfig the flags ask for: --model_config_file's, or one model from
    --model_name and --model_base_path (made absolute; the packaged model by default), each model's base path checked to
    hold a version.

    Raises:
      cli.UsageError: --model_config_file with --model_name or --model_base_path, or a
        config file that cannot be served (exit 2).
      ExportError: a base path without a servable version, or a packaged model that is
        missing or damaged (exit 2).
    """
    if flag_values.model_config_file:
        if flag_values.model_base_path or flag_values["model_name"].present:
            raise cli.UsageError("--model_config_file lists the models to serve: give it "
                                 "without --model_name and --model_base_path")
        try:
            config = model_config.read_model_server_config(flag_values.model_config_file)
            model_config.check_model_server_config(config)
        except model_config.ConfigError as e:
            raise cli.UsageError(f"--model_config_file: {e}") from None
    else:
        base_path = packaged_models.serving_base_path(flag_values.model_base_path)
        config = model_config.single_model_config(flag_values.model_name,
                                                  os.path.abspath(base_path))
    for model in config.model_config_list.config:
        versions_on_disk(model.base_path)
    return config


def _load_models(manager: Models, config: Any) -> None:
    """Loads and warms up the config's models before the server starts.

    Raises:
      TetraError: a model with no servable version, or a bad export (exit 2).
      RuntimeError: a model that failed to load (exit 1).
    """
    try:
        failures = manager.apply_config(config)
    except model_config.ConfigError as e:
        raise cli.UsageError(f"--model_config_file: {e}") from None
    for name, error in sorted(failures.items()):
        if isinstance(error, TetraError):
            raise error
        raise RuntimeError(f"cannot load model {name!r}: {type(error).__name__}: "
                           f"{first_line(str(error))}")


def _size_tensorflow_threads(model_slots: int, intra_op: int, inter_op: int) -> None:
    """Sizes TensorFlow's thread pools from the flags (0: TensorFlow's default) through
    `cpu.share_cores`, before any model loads (TensorFlow refuses after), and logs them.

    Raises:
      RuntimeError: the flags ask for sizes TensorFlow no longer takes (exit 1).
    """
    if not cpu.share_cores(model_slots, intra_op=intra_op, inter_op=inter_op) and (
            intra_op or inter_op):
        raise RuntimeError("cannot size TensorFlow's thread pools (--tensorflow_intra_op_"
                           "parallelism, --tensorflow_inter_op_parallelism): TensorFlow "
                           f"reports {cpu.thread_pools_text()}")
    absl_logging.info("TensorFlow threads: %s", cpu.thread_pools_text())


def _serve(flag_values: Any, predictor: Predictor, metrics: Metrics, metrics_path: str | None,
           access_log: AccessLog) -> None:
    """Serves REST (the metrics at metrics_path, if any) and gRPC until SIGINT or SIGTERM,
    then shuts both down gracefully."""
    host = flag_values.rest_api_host
    grpc_threads = futures.ThreadPoolExecutor(max_workers=flag_values.rest_api_num_threads,
                                              thread_name_prefix="grpc")
    try:
        grpc_server, grpc_port = create_grpc_server(
            predictor, metrics, host, flag_values.port, grpc_threads,
            flag_values.max_request_bytes, access_log.info)
    except (OSError, RuntimeError) as e:
        raise RuntimeError(f"cannot serve gRPC on {host}:{flag_values.port}: {e}") from None
    in_flight = _InFlightCounter(
        RestApp(predictor, flag_values.max_request_bytes, metrics, access_log.info,
                metrics_path=metrics_path,
                page=(ParsePage(lambda: list(predictor.manager.served()))
                      if flag_values.parse_page else None)))
    try:
        rest_server = create_rest_server(
            in_flight, host, flag_values.rest_api_port,
            threads=flag_values.rest_api_num_threads,
            max_request_bytes=flag_values.max_request_bytes,
            read_timeout_s=flag_values.request_read_timeout_s, metrics=metrics)
    except OSError as e:
        raise RuntimeError(f"cannot serve on {host}:{flag_values.rest_api_port}: "
                           f"{e.strerror or e}") from None

    def on_ready(port: int) -> None:
        for name, versions in sorted(predictor.manager.served().items()):
            absl_logging.info("serving model %r versions %s at http://%s:%d/v1/models/%s "
                              "and gRPC %s:%d", name, ", ".join(map(str, versions)), host,
                              port, name, host, grpc_port)

    _serve_until_signal(rest_server, in_flight, grpc_server, flag_values.shutdown_timeout_s,
                        on_ready, on_stop=predictor.manager.stop)
    grpc_threads.shutdown(wait=False)


class _InFlightCounter:
    """WSGI middleware counting requests in progress, so shutdown can wait for them."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]]) -> None:
        self._wsgi_app = wsgi_app
        self._count = 0
        self._idle = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with self._idle:
            self._count += 1
        try:
            return self._wsgi_app(environ, start_response)
        finally:
            with self._idle:
                self._count -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Whether every request finished within timeout_s."""
        with self._idle:
            return self._idle.wait_for(lambda: self._count == 0, timeout=timeout_s)


def _serve_until_signal(rest_server: Any, in_flight: _InFlightCounter, grpc_server: Any,
                        shutdown_timeout_s: float, on_ready: Callable[[int], None],
                        on_stop: Callable[[], None]) -> None:
    """Runs the REST server (waitress's event loop, on its own thread) and the gRPC server
    until SIGINT or SIGTERM, then shuts them down gracefully (`_shut_down`)."""
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=rest_server.run, name="http", daemon=True)
    thread.start()
    grpc_server.start()
    on_ready(int(rest_server.effective_port))
    try:
        while not stop.wait(0.5) and thread.is_alive():
            pass
    finally:
        _shut_down(rest_server, thread, in_flight, grpc_server, shutdown_timeout_s, on_stop)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _shut_down(rest_server: Any, rest_thread: threading.Thread, in_flight: _InFlightCounter,
               grpc_server: Any, timeout_s: float, on_stop: Callable[[], None]) -> None:
    """Stops accepting (REST and gRPC), stops polling for versions, waits up to timeout_s
    for requests in progress and lets their answers go out, then closes every
    connection."""
    from waitress import wasyncore

    absl_logging.info("shutting down: no new connections; waiting up to %.0f s for "
                      "requests in progress", timeout_s)
    # Everything that touches waitress's sockets runs on its event loop thread.
    rest_server.trigger.pull_trigger(lambda: wasyncore.dispatcher.close(rest_server))
    grpc_stopped = grpc_server.stop(timeout_s)
    on_stop()
    if not in_flight.wait_idle(timeout_s):
        absl_logging.warning("requests still in progress at shutdown were abandoned")
    time.sleep(0.2)  # Let the loop send the last answers.
    rest_server.trigger.pull_trigger(lambda: wasyncore.close_all(rest_server._map))
    rest_thread.join(timeout=5)
    rest_server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)
    grpc_stopped.wait(timeout_s)


def run() -> None:
    """The program: flags, then main under tetra_tf.cli's exit-code convention."""
    _define_flags()
    try:
        cli.run(main)
    except SystemExit as e:
        _exit_now(e.code)


def _exit_now(code: Any) -> None:
    """Exits after flushing, skipping the interpreter's teardown: TensorFlow's and gRPC's
    native threads make that take ~10 s after a clean shutdown."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code if isinstance(code, int) else cli.EXIT_OK if code is None
             else cli.EXIT_FAILURE)


if __name__ == "__main__":
    run()
