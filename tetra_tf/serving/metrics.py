"""Observability: Prometheus metrics and the one-line-per-request access log."""

from __future__ import annotations

import logging
import logging.handlers
import queue
from typing import Any

from absl import logging as absl_logging


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


class Metrics:
    """Prometheus metrics, served at /monitoring/prometheus/metrics (TF Serving's path)."""

    def __init__(self) -> None:
        import prometheus_client

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

    def observe(self, api: str, method: str, status: str, seconds: float) -> None:
        self.requests.labels(api, method, status).inc()
        self.latency.labels(api, method).observe(seconds)

    def count(self, api: str, method: str, status: str) -> None:
        """Counts a request refused before its arrival was timed (e.g. REST's 413)."""
        self.requests.labels(api, method, status).inc()

    def exposition(self) -> tuple[bytes, str]:
        import prometheus_client

        return (prometheus_client.generate_latest(self.registry),
                prometheus_client.CONTENT_TYPE_LATEST)
