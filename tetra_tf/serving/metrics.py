"""Observability: Prometheus metrics and the one-line-per-request access log.

The metrics are TF Serving's own (`TfServingMetrics`: :tensorflow:serving:request_count,
request_latency, runtime_latency and TensorFlow's SavedModel load counters, under TF
Serving's names and labels) beside this server's tetra_serving_* extras (`Metrics`).
`read_monitoring_config` reads TF Serving's --monitoring_config_file.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import logging.handlers
import queue
import re
import threading
import time
from typing import Any, Callable, Iterator

from absl import logging as absl_logging

from tetra_tf.errors import InputError

# TF Serving's default metrics path (PrometheusExporter::kPrometheusPath).
DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"


class _UnlockedQueueHandler(logging.handlers.QueueHandler):
    """A QueueHandler that emits without taking the handler lock: its queue's put is
    already thread-safe, and request threads would otherwise queue for that lock."""

    def handle(self, record: logging.LogRecord) -> bool | logging.LogRecord:
        filtered = self.filter(record)
        if isinstance(filtered, logging.LogRecord):  # Python 3.12+: a filter may replace it.
            record = filtered
        if filtered:
            self.emit(record)
        return filtered


class AccessLog:
    """The one-line-per-request log, written by a background thread.

    A request thread only builds its record and puts it on a queue; one listener thread
    hands the records, in order, to absl's handler. Logging in the request threads
    themselves made them queue for the handler's lock: at 32 concurrent clients that cost
    about 2.7 ms of CPU per request, taken from the model calls. (absl's line prefix shows
    the id of the thread that writes, so every request line shows the listener's.)
    """

    def __init__(self, handler: logging.Handler | None = None,
                 level: int | None = None) -> None:
        """Args:
          handler: where the lines go (default: absl's handler, i.e. stderr).
          level: lines are INFO, so below this they are dropped (default: absl's level,
            which --verbosity sets).
        """
        records: queue.SimpleQueue = queue.SimpleQueue()
        self._logger = logging.Logger("tetra_serving.access")
        self._logger.setLevel(level if level is not None
                              else absl_logging.get_absl_logger().getEffectiveLevel())
        self._logger.addHandler(_UnlockedQueueHandler(records))
        self._listener = logging.handlers.QueueListener(
            records, handler or absl_logging.get_absl_handler())
        self._listener.start()

    def info(self, message: str, *args: Any) -> None:
        self._logger.info(message, *args, stacklevel=2)

    def stop(self) -> None:
        """Writes the lines still queued, then ends the listener thread."""
        self._listener.stop()


def read_monitoring_config(path: str) -> str | None:
    """The metrics path that TF Serving's MonitoringConfig in a text file enables
    (`prometheus_config { enable: true, path: "..." }`, the path defaulting to TF
    Serving's), or None when it does not enable them.

    Raises:
      InputError: the file cannot be read, is not UTF-8 or not a MonitoringConfig, or its
        path does not start with "/" or lies under /v1/ (where it would hide the API).
    """
    from google.protobuf import text_format

    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        config = text_format.Parse(text, _monitoring_config_class()())
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text (byte {e.start + 1})") from None
    except text_format.ParseError as e:
        raise InputError(f"{path}: {str(e).splitlines()[0]}") from None
    prometheus = config.prometheus_config
    if not prometheus.enable:
        return None
    metrics_path = prometheus.path or DEFAULT_METRICS_PATH
    if not metrics_path.startswith("/") or metrics_path.lower().startswith("/v1/"):
        raise InputError(f"{path}: prometheus_config.path must start with / and not lie "
                         f"under /v1/, got {metrics_path!r}")
    return metrics_path


def _monitoring_config_class() -> Any:
    """tensorflow.serving.MonitoringConfig (tensorflow_serving/config/monitoring_config.proto),
    which the tensorflow-serving-api package does not ship, built from its two messages."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    file_proto = descriptor_pb2.FileDescriptorProto(
        name="tetra_serving/monitoring_config.proto", package="tensorflow.serving",
        syntax="proto3")
    file_proto.message_type.add(name="PrometheusConfig", field=[
        field(name="enable", number=1, label=field.LABEL_OPTIONAL, type=field.TYPE_BOOL),
        field(name="path", number=2, label=field.LABEL_OPTIONAL, type=field.TYPE_STRING)])
    file_proto.message_type.add(name="MonitoringConfig", field=[
        field(name="prometheus_config", number=1, label=field.LABEL_OPTIONAL,
              type=field.TYPE_MESSAGE, type_name=".tensorflow.serving.PrometheusConfig")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.MonitoringConfig"))


# TF Serving's latency buckets, in microseconds: TensorFlow's
# monitoring::Buckets::Exponential(10, 1.8, 33) (up to ~20 minutes), then +Inf.
LATENCY_BUCKETS_US = tuple(10 * 1.8 ** i for i in range(33))
# Label sets kept per metric: label values come from requests (a model name), so a client
# naming many models cannot grow the metrics without bound; later ones count as OVERFLOW.
MAX_SERIES_PER_METRIC = 1000
OVERFLOW = "(other)"


def prometheus_name(name: str) -> str:
    """A TensorFlow metric name as TF Serving's exporter writes it: /a/b_c → :a:b_c."""
    name = re.sub(r"[^a-zA-Z0-9_]", ":", name)
    return "_" + name if name[:1].isdigit() else name


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _TfMetric:
    """One TensorFlow monitoring metric (a Counter, or a Sampler when `buckets` is given):
    its values by label values, guarded by the caller's lock."""

    def __init__(self, name: str, help_text: str, labels: tuple[str, ...],
                 buckets: tuple[float, ...] | None = None) -> None:
        self.name, self.help_text, self.labels, self.buckets = name, help_text, labels, buckets
        self.values: dict[tuple[str, ...], Any] = {}

    def add(self, label_values: tuple[str, ...], value: float) -> None:
        """Adds to a counter, or records a sample in a histogram (into the first bucket whose
        limit exceeds it, as TensorFlow's histograms do)."""
        if label_values not in self.values and len(self.values) >= MAX_SERIES_PER_METRIC:
            label_values = (OVERFLOW,) * len(self.labels)
        if self.buckets is None:
            self.values[label_values] = self.values.get(label_values, 0) + value
            return
        counts, total = self.values.get(label_values) or ([0] * (len(self.buckets) + 1), 0)
        counts[bisect.bisect_right(self.buckets, value)] += 1
        self.values[label_values] = (counts, total + value)

    def lines(self) -> Iterator[str]:
        """The metric in Prometheus text, as TF Serving's exporter writes it (counters keep
        their name, without _total; histograms in cumulative buckets)."""
        name = prometheus_name(self.name)
        yield f"# HELP {name} {self.help_text}"
        yield f"# TYPE {name} {'counter' if self.buckets is None else 'histogram'}"
        for label_values, value in sorted(self.values.items()):
            labels = ",".join(f'{label}="{_label_value(v)}"'
                              for label, v in zip(self.labels, label_values))
            if self.buckets is None:
                yield f"{name}{{{labels}}} {int(value)}"
                continue
            counts, total = value
            prefix = f"{name}_bucket{{{labels}{',' if labels else ''}"
            cumulative = 0
            for index, count in enumerate(counts):
                cumulative += count
                limit = format(self.buckets[index], ".6g") if index < len(self.buckets) \
                    else "+Inf"
                yield f'{prefix}le="{limit}"}} {cumulative}'
            yield f"{name}_sum{{{labels}}} {total!r}"
            yield f"{name}_count{{{labels}}} {cumulative}"


class TfServingMetrics:
    """TF Serving's own metrics, under its names and labels (from its source:
    servables/tensorflow/util.cc, and TensorFlow's cc/saved_model/loader.cc for model
    loads), in the text its Prometheus exporter writes. Latencies are in microseconds.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.request_count = _TfMetric(
            "/tensorflow/serving/request_count", "The total number of requests.",
            ("model_name", "status"))
        self.request_latency = _TfMetric(
            "/tensorflow/serving/request_latency", "Distribution of wall time (in "
            "microseconds) for Tensorflow Serving request.",
            ("model_name", "API", "entrypoint"), LATENCY_BUCKETS_US)
        self.runtime_latency = _TfMetric(
            "/tensorflow/serving/runtime_latency", "Distribution of wall time (in "
            "microseconds) for Tensorflow runtime.", ("model_name", "API", "runtime"),
            LATENCY_BUCKETS_US)
        self.load_attempt_count = _TfMetric(
            "/tensorflow/cc/saved_model/load_attempt_count", "The number of times a "
            "SavedModel was successfully loaded.", ("model_path", "status"))
        self.load_latency = _TfMetric(
            "/tensorflow/cc/saved_model/load_latency", "Latency in microseconds for "
            "SavedModels that were successfully loaded.", ("model_path",))

    def add(self, metric: _TfMetric, label_values: tuple[str, ...], value: float) -> None:
        with self._lock:
            metric.add(label_values, value)

    def request(self, model_name: str, status: str, api: str, entrypoint: str,
                seconds: float | None) -> None:
        """Counts a request by its model and status code; times it (API, entrypoint) only
        when it succeeded and `seconds` is given, as TF Serving does."""
        with self._lock:
            self.request_count.add((model_name, status), 1)
            if status == "OK" and seconds is not None:
                self.request_latency.add((model_name, api, entrypoint), round(seconds * 1e6))

    def exposition(self) -> str:
        with self._lock:
            metrics = sorted((self.request_count, self.request_latency, self.runtime_latency,
                              self.load_attempt_count, self.load_latency),
                             key=lambda metric: metric.name)
            return "".join(line + "\n" for metric in metrics if metric.values
                           for line in metric.lines())


class Metrics:
    """Prometheus metrics: TF Serving's (`TfServingMetrics`) and this server's
    tetra_serving_* extras, served at TF Serving's path (or --monitoring_config_file's)."""

    def __init__(self) -> None:
        import prometheus_client

        self.tf_serving = TfServingMetrics()
        self.registry = prometheus_client.CollectorRegistry()
        self.requests = prometheus_client.Counter(
            "tetra_serving_requests", "Requests answered, by API, method and TF Serving "
            "status code (OK, INVALID_ARGUMENT, UNAVAILABLE, ...).",
            ["api", "method", "status"], registry=self.registry)
        self.latency = prometheus_client.Histogram(
            "tetra_serving_request_latency_seconds", "Time from a request's arrival (body "
            "read) to its answer.", ["api", "method"], registry=self.registry,
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.batch_size = prometheus_client.Histogram(
            "tetra_serving_batch_size", "Rows per model call (merged requests with "
            "batching).", registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
        self.model_call_seconds = prometheus_client.Histogram(
            "tetra_serving_model_call_seconds", "Time of each model call (one merged batch "
            "with batching), not counting its wait for a model slot; with one slot, its "
            "sum's rate is the share of time the model runs.",
            registry=self.registry,
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.queue_depth = prometheus_client.Gauge(
            "tetra_serving_queue_depth", "Rows waiting in the batch queues.",
            registry=self.registry)
        self.model_version = prometheus_client.Gauge(
            "tetra_serving_model_version", "The version new requests are served by.",
            registry=self.registry)

    def observe(self, api: str, method: str, status: str, seconds: float | None,
                model_name: str | None = None, tf_api: str | None = None) -> None:
        """Counts and times an answered request: api is "rest" or "grpc", method this
        server's label (predict, classify, metadata, ...), status TF Serving's code.

        Args:
          seconds: from its arrival to its answer; None for a refusal before its arrival
            was timed (e.g. REST's 413), which is counted only.
          model_name: the model it named, for TF Serving's metrics; None for a request
            TF Serving would not count (a path outside /v1/).
          tf_api: TF Serving's API label for it (default: `method`), e.g. "Predict" for
            gRPC.
        """
        self.requests.labels(api, method, status).inc()
        if seconds is not None:
            self.latency.labels(api, method).observe(seconds)
        if model_name is not None:
            self.tf_serving.request(model_name, status, tf_api or method, api.upper(),
                                    seconds)

    def model_calls(self, model_name: str) -> Callable[[float], None]:
        """What observes each model call's seconds (`ServedModel`'s on_call_seconds):
        tetra_serving_model_call_seconds and TF Serving's runtime_latency (API Predict,
        runtime TF1: TensorFlow's classic runtime, as TF Serving labels it)."""
        labels = (model_name, "Predict", "TF1")

        def observe(seconds: float) -> None:
            self.model_call_seconds.observe(seconds)
            self.tf_serving.add(self.tf_serving.runtime_latency, labels, round(seconds * 1e6))

        return observe

    @contextlib.contextmanager
    def model_load(self, model_path: str) -> Iterator[None]:
        """Around a SavedModel's load: counts the attempt (status success or fail) and adds a
        successful load's microseconds, as TensorFlow's loader does for TF Serving."""
        started = time.perf_counter()
        try:
            yield
        except BaseException:
            self.tf_serving.add(self.tf_serving.load_attempt_count, (model_path, "fail"), 1)
            raise
        self.tf_serving.add(self.tf_serving.load_attempt_count, (model_path, "success"), 1)
        self.tf_serving.add(self.tf_serving.load_latency, (model_path,),
                            round((time.perf_counter() - started) * 1e6))

    def exposition(self) -> tuple[bytes, str]:
        """The Prometheus text (TF Serving's metrics, then the extras) and its content type."""
        import prometheus_client

        return (self.tf_serving.exposition().encode("utf-8")
                + prometheus_client.generate_latest(self.registry),
                prometheus_client.CONTENT_TYPE_LATEST)
