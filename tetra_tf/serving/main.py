"""The server's command line: flags (TF Serving's names), start-up, serving until a signal.

Exit codes (tetra_tf.cli): 0 after a clean shutdown (SIGINT or SIGTERM); 2 for a usage or
input error (bad flags, a bad batching parameters file, no servable version under
--model_base_path); 1 for any other failure (the model fails to load, the port is taken).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 2, before TensorFlow is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import flags  # noqa: E402
from absl import logging as absl_logging  # noqa: E402

from tetra_tf import cli  # noqa: E402
from tetra_tf.serving import batching  # noqa: E402
from tetra_tf.serving.admission import NUM_WORDS_INPUT, Limits  # noqa: E402
from tetra_tf.serving.errors import first_line  # noqa: E402
from tetra_tf.serving.grpc_api import create_grpc_server  # noqa: E402
from tetra_tf.serving.manager import ModelManager, find_latest_version  # noqa: E402
from tetra_tf.serving.metrics import AccessLog, Metrics  # noqa: E402
from tetra_tf.serving.predictor import Predictor  # noqa: E402
from tetra_tf.serving.rest import RestApp, serve  # noqa: E402
from tetra_tf.serving.runners import BatchingRunner, DirectRunner  # noqa: E402
from tetra_tf.serving.servable import ServedModel  # noqa: E402

# The flags belong to the program that runs `run` (serving/server.py), for its --help.
flags.disclaim_key_flags()


def _define_flags() -> None:
    flags.DEFINE_string("model_base_path", None,
                        "Directory with numbered SavedModel versions (BASE/1/saved_model.pb); "
                        "the highest version is served.")
    flags.DEFINE_string("model_name", "tetra", "Model name in the request paths.")
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
    flags.DEFINE_list("sentence_inputs", ["sentences"],
                      "String inputs checked as sentences (tetra_tf.sentences: valid "
                      "UTF-8, 1 to --max_words_per_sentence whitespace-separated words).")
    flags.DEFINE_list("word_inputs", ["words"],
                      "String inputs [batch, width] checked as pre-split sentences (width at "
                      f"most --max_words_per_sentence; with a '{NUM_WORDS_INPUT}' input, its "
                      "first num_words entries per row are non-empty words without spaces).")
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
    flags.DEFINE_float("shutdown_timeout_s", 30.0,
                       "On SIGINT/SIGTERM, wait this long for requests in progress.",
                       lower_bound=0.0)


def configure_tensorflow_threads(intra_op: int, inter_op: int) -> str:
    """Sets TensorFlow's thread pools before any model loads (TensorFlow refuses after).

    Args:
      intra_op: threads one op may use; 0 keeps TensorFlow's default.
      inter_op: threads running independent ops; 0 keeps TensorFlow's default.

    Returns:
      What TensorFlow now reports, for the log, e.g. "intra-op 1, inter-op default".
    """
    import tensorflow as tf

    if intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    return ", ".join(f"{name} {count or 'default'}" for name, count in (
        ("intra-op", tf.config.threading.get_intra_op_parallelism_threads()),
        ("inter-op", tf.config.threading.get_inter_op_parallelism_threads())))


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
    flag_values = flags.FLAGS
    cli.require("model_base_path")
    version, export_dir = find_latest_version(flag_values.model_base_path)
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
    for port in (flag_values.rest_api_port, flag_values.port):
        _check_port_free(flag_values.rest_api_host, port)
    absl_logging.info("loading model %r version %d from %s", flag_values.model_name, version,
                      export_dir)
    absl_logging.info("TensorFlow threads: %s", configure_tensorflow_threads(
        flag_values.tensorflow_intra_op_parallelism,
        flag_values.tensorflow_inter_op_parallelism))
    metrics = Metrics()
    limits = Limits(max_batch_size=flag_values.max_batch_size,
                    max_words_per_sentence=flag_values.max_words_per_sentence,
                    max_words_per_request=flag_values.max_words_per_request,
                    sentence_inputs=tuple(flag_values.sentence_inputs),
                    word_inputs=tuple(flag_values.word_inputs),
                    max_pieces_per_request=flag_values.max_pieces_per_request)
    # With batching, each batch thread runs a model call: let that many run at once.
    model_slots = (batching_params.num_batch_threads if batching_params is not None
                   else flag_values.max_concurrent_predictions)

    def load(new_version: int, new_export_dir: str) -> ServedModel:
        return ServedModel(flag_values.model_name, new_version, new_export_dir, limits,
                           model_slots, metrics.model_call_seconds.observe)

    try:
        model = load(version, export_dir)
    except Exception as e:  # noqa: BLE001 - one line (exit 1), naming the directory
        raise RuntimeError(f"cannot load {export_dir}: {type(e).__name__}: "
                           f"{first_line(str(e))}") from None
    model.warm_up()
    metrics.model_version.set(model.version)
    runner: DirectRunner | BatchingRunner
    if batching_params is not None:
        runner = BatchingRunner(batching_params, limits.word_inputs, metrics)
        absl_logging.info("batching: %s", batching_params)
    else:
        runner = DirectRunner(metrics)
    manager = ModelManager(model, load, on_unload=runner.unload,
                           on_switch=lambda m: metrics.model_version.set(m.version))
    if flag_values.file_system_poll_wait_seconds > 0:
        manager.watch(flag_values.model_base_path, flag_values.file_system_poll_wait_seconds)
    access_log = AccessLog()
    try:
        _serve(flag_values, Predictor(manager, runner), metrics, access_log)
    finally:
        access_log.stop()
    return cli.EXIT_OK


def _serve(flag_values: Any, predictor: Predictor, metrics: Metrics,
           access_log: AccessLog) -> None:
    """Serves REST and gRPC until a signal."""
    host = flag_values.rest_api_host
    rest_app = RestApp(predictor, flag_values.max_request_bytes, metrics, access_log.info)
    try:
        grpc_server, grpc_port = create_grpc_server(
            predictor, metrics, host, flag_values.port, flag_values.rest_api_num_threads,
            flag_values.max_request_bytes, access_log.info)
    except (OSError, RuntimeError) as e:
        raise RuntimeError(f"cannot serve gRPC on {host}:{flag_values.port}: {e}") from None
    model = predictor.manager.current

    def on_ready(port: int) -> None:
        absl_logging.info("serving model %r version %d (signatures: %s) at http://%s:%d/v1/"
                          "models/%s and gRPC %s:%d", model.name, model.version,
                          ", ".join(model.signature_names), host, port, model.name, host,
                          grpc_port)

    try:
        serve(rest_app, host, flag_values.rest_api_port, flag_values.shutdown_timeout_s,
              on_ready, threads=flag_values.rest_api_num_threads,
              max_request_bytes=flag_values.max_request_bytes,
              read_timeout_s=flag_values.request_read_timeout_s, grpc_server=grpc_server,
              on_stop=predictor.manager.stop, metrics=metrics)
    except OSError as e:
        raise RuntimeError(f"cannot serve on {host}:{flag_values.rest_api_port}: "
                           f"{e.strerror or e}") from None


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
