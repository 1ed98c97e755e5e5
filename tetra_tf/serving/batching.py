"""Cross-request batching for the server, with TensorFlow Serving's semantics.

TF Serving's `--enable_batching` merges concurrent requests into one model call
(BasicBatchScheduler): requests join the open batch of their signature until it holds
`max_batch_size` rows or `batch_timeout_micros` have passed since its first request; at
most `max_enqueued_batches` batches wait per queue (the open one included), and a request
that finds the queue full fails at once with UNAVAILABLE instead of piling up;
`num_batch_threads` batches run at a time. A request larger than a batch is split across
batches (TF Serving's large batch splitting) and its answers joined back.

The parameters come from `--batching_parameters_file` in TF Serving's text format, e.g.

    max_batch_size { value: 32 }
    batch_timeout_micros { value: 1000 }
    max_enqueued_batches { value: 100 }
    num_batch_threads { value: 2 }
    allowed_batch_sizes: 8
    allowed_batch_sizes: 32

parsed with protobuf's text format against a descriptor of TF Serving's
BatchingParameters message (tensorflow_serving/servables/tensorflow/
session_bundle_config.proto), built here because the tensorflow-serving-api package does
not ship that proto.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import threading
import time
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from tetra_tf.contract import export_format

# TF Serving's BatchingParameters: (field, number, wrapper type); allowed_batch_sizes is a
# repeated int64. Fields this server does not implement parse, then are refused by name
# (rather than silently dropped).
_WRAPPED_FIELDS = [
    ("max_batch_size", 1, "Int64Value"),
    ("batch_timeout_micros", 2, "Int64Value"),
    ("max_enqueued_batches", 3, "Int64Value"),
    ("num_batch_threads", 4, "Int64Value"),
    ("thread_pool_name", 5, "StringValue"),
    ("pad_variable_length_inputs", 7, "BoolValue"),
    ("enable_large_batch_splitting", 8, "BoolValue"),
    ("max_execution_batch_size", 9, "Int64Value"),
]
_ALLOWED_BATCH_SIZES_FIELD = 6


class BatchingParametersError(ValueError):
    """A batching parameters file that cannot be used (a one-line reason)."""


class QueueFullError(Exception):
    """The batch queue is full: TF Serving's UNAVAILABLE (HTTP 503)."""


@dataclasses.dataclass(frozen=True)
class BatchingParameters:
    """TF Serving's batching parameters, with its defaults."""

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = os.cpu_count() or 1
    allowed_batch_sizes: tuple[int, ...] = ()
    enable_large_batch_splitting: bool = True
    max_execution_batch_size: int | None = None

    @property
    def execution_batch_size(self) -> int:
        """Rows in one model call (max_execution_batch_size when splitting large ones)."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size:
            return self.max_execution_batch_size
        return self.max_batch_size

    def padded_size(self, rows: int) -> int:
        """The batch size a batch of `rows` is padded to (the next allowed size)."""
        for size in self.allowed_batch_sizes:
            if size >= rows:
                return size
        return rows


def _message_class() -> Any:
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    file_proto = descriptor_pb2.FileDescriptorProto(
        name="tetra_serving/batching_parameters.proto", package="tensorflow.serving",
        syntax="proto3", dependency=["google/protobuf/wrappers.proto"])
    message = file_proto.message_type.add(name="BatchingParameters")
    field = descriptor_pb2.FieldDescriptorProto
    for name, number, wrapper in _WRAPPED_FIELDS:
        message.field.add(name=name, number=number, label=field.LABEL_OPTIONAL,
                          type=field.TYPE_MESSAGE, type_name=f".google.protobuf.{wrapper}")
    message.field.add(name="allowed_batch_sizes", number=_ALLOWED_BATCH_SIZES_FIELD,
                      label=field.LABEL_REPEATED, type=field.TYPE_INT64)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(file_proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


def parse_batching_parameters(text: str) -> BatchingParameters:
    """Parses TF Serving's BatchingParameters text format and checks it as TF Serving does.

    Raises:
      BatchingParametersError: a syntax error, an unknown field or an invalid value.
    """
    from google.protobuf import text_format

    proto = _message_class()()
    try:
        text_format.Parse(text, proto)
    except text_format.ParseError as e:
        raise BatchingParametersError(str(e).splitlines()[0]) from None
    values: dict[str, Any] = {}
    implemented = {f.name for f in dataclasses.fields(BatchingParameters)}
    for name, _, _ in _WRAPPED_FIELDS:
        if not proto.HasField(name):
            continue
        value = getattr(proto, name).value
        if name == "pad_variable_length_inputs" and value:
            continue  # This server always pads rows of words: true is what it does.
        if name not in implemented:
            raise BatchingParametersError(f"{name} is not supported by this server"
                                          + (" (it always pads rows of words)"
                                             if name == "pad_variable_length_inputs" else ""))
        values[name] = value
    values["allowed_batch_sizes"] = tuple(proto.allowed_batch_sizes)
    params = BatchingParameters(**values)
    for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
        if getattr(params, name) <= 0:
            raise BatchingParametersError(f"{name} must be positive, got "
                                          f"{getattr(params, name)}")
    if params.batch_timeout_micros < 0:
        raise BatchingParametersError("batch_timeout_micros must not be negative")
    if params.max_execution_batch_size is not None and not (
            0 < params.max_execution_batch_size <= params.max_batch_size):
        raise BatchingParametersError("max_execution_batch_size must be between 1 and "
                                      "max_batch_size")
    sizes = params.allowed_batch_sizes
    if sizes:
        if any(b <= a for a, b in zip(sizes, sizes[1:])) or sizes[0] <= 0:
            raise BatchingParametersError("allowed_batch_sizes must be positive and "
                                          f"increasing, got {list(sizes)}")
        if sizes[-1] != params.execution_batch_size:
            raise BatchingParametersError(
                f"the last entry in allowed_batch_sizes ({sizes[-1]}) must equal "
                f"max_batch_size ({params.execution_batch_size}), as in TF Serving")
    return params


def read_batching_parameters(path: str) -> BatchingParameters:
    """parse_batching_parameters on a file, errors naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise BatchingParametersError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise BatchingParametersError(f"{path} is not UTF-8 text (byte {e.start + 1})"
                                      ) from None
    try:
        return parse_batching_parameters(text)
    except BatchingParametersError as e:
        raise BatchingParametersError(f"{path}: {e}") from None


# ----------------------------------------------------------------------------------------
# The scheduler.


class Task:
    """One request (or one slice of a split request) waiting for its batch.

    Attributes:
      key: requests merge only with others of the same key (signature, input shapes).
      rows: its batch rows.
      cost: its share of a per-call budget (subword pieces), 0 if none.
      payload: whatever the batch function needs (the input arrays).
      result, error: set when the batch has run.
    """

    def __init__(self, key: Hashable, rows: int, cost: int, payload: Any) -> None:
        self.key = key
        self.rows = rows
        self.cost = cost
        self.payload = payload
        self.result: Any = None
        self.error: BaseException | None = None
        self._done = threading.Event()

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self._done.set()

    def wait(self) -> Any:
        """Blocks until the task's batch has run; returns its result or raises its error."""
        self._done.wait()
        if self.error is not None:
            raise self.error
        return self.result


class _Batch:
    def __init__(self) -> None:
        self.tasks: list[Task] = []
        self.rows = 0
        self.cost = 0
        self.created = time.monotonic()
        self.closed = False


class BatchScheduler:
    """TF Serving's BasicBatchScheduler: one queue per key, shared batch threads.

    `run_batch(tasks)` is called with the tasks of one batch (all of one key); it must
    finish every task (Task.finish). At most num_batch_threads batches run at a time.

    A request that finds the scheduler idle (no batch running, its queue empty) runs at once
    on its own thread, whatever the batch timeout: nothing is there to merge with, so
    waiting would only add the timeout (and two thread hand-offs) to a lone request's
    latency. Under load, requests wait in their queue, and the timeout is what lets a
    batch gather the clients that return together from the previous one. With no batch
    timeout, a request also runs at once when its queue is empty and a batch slot is free.
    """

    def __init__(self, params: BatchingParameters, run_batch: Callable[[list[Task]], None],
                 max_cost: int | None = None, name: str = "batch") -> None:
        self.params = params
        self._run_batch = run_batch
        self._max_rows = params.execution_batch_size
        self._max_cost = max_cost
        self._timeout_s = params.batch_timeout_micros / 1e6
        self._lock = threading.Condition()
        self._queues: dict[Hashable, collections.deque[_Batch]] = {}
        self._stopping = False
        self._running = 0  # Batches running now (on batch threads or inline).
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(params.num_batch_threads)]
        for thread in self._threads:
            thread.start()

    def _fits(self, batch: _Batch, task: Task) -> bool:
        if batch.rows + task.rows > self._max_rows:
            return False
        return self._max_cost is None or batch.cost + task.cost <= self._max_cost

    def submit(self, task: Task, inline: bool = True) -> None:
        """Adds a task to its key's open batch (a new batch when it does not fit).

        Args:
          inline: False: never run the task on the caller's thread, even at an idle
            scheduler (for the slices of a split request, which the batch threads then
            run side by side instead of one after another on the caller's thread).

        Raises:
          QueueFullError: max_enqueued_batches are waiting and the task fits none of them.
          ValueError: the task alone is over a batch's rows or cost.
        """
        if task.rows > self._max_rows or (self._max_cost is not None
                                          and task.cost > self._max_cost):
            raise ValueError("task larger than a batch; split it first")
        with self._lock:
            if self._stopping:
                raise QueueFullError("the server is shutting down")
            queue = self._queues.setdefault(task.key, collections.deque())
            run_inline = inline and not queue and (
                self._running == 0 or (self._timeout_s == 0
                                       and self._running < self.params.num_batch_threads))
            if run_inline:
                self._running += 1
        if run_inline:
            self._run_counted([task])
            return
        with self._lock:
            if self._stopping:
                raise QueueFullError("the server is shutting down")
            queue = self._queues.setdefault(task.key, collections.deque())
            batch = queue[-1] if queue and not queue[-1].closed else None
            if batch is None or not self._fits(batch, task):
                if batch is not None:
                    batch.closed = True
                if len(queue) >= self.params.max_enqueued_batches:
                    raise QueueFullError(
                        "The batch scheduling queue to which this task was submitted is "
                        f"full (max_enqueued_batches={self.params.max_enqueued_batches})")
                batch = _Batch()
                queue.append(batch)
            batch.tasks.append(task)
            batch.rows += task.rows
            batch.cost += task.cost
            if batch.rows >= self._max_rows:
                batch.closed = True
            self._lock.notify_all()

    def queued_rows(self) -> int:
        """Rows waiting in all queues (not yet taken by a batch thread)."""
        with self._lock:
            return sum(batch.rows for queue in self._queues.values() for batch in queue)

    def _next_batch(self) -> _Batch | None:
        """The oldest batch ready to run (closed, or open past the timeout); waits for one.

        Returns None when stopping and every queue is empty.
        """
        with self._lock:
            while True:
                now = time.monotonic()
                ready, wake_at = None, None
                for queue in self._queues.values():
                    if not queue:
                        continue
                    batch = queue[0]
                    due = batch.created + self._timeout_s
                    if batch.closed or due <= now or self._stopping:
                        if ready is None or batch.created < ready[1].created:
                            ready = (queue, batch)
                    elif wake_at is None or due < wake_at:
                        wake_at = due
                if ready is not None and self._running < self.params.num_batch_threads:
                    queue, batch = ready
                    queue.popleft()
                    batch.closed = True
                    self._running += 1
                    return batch
                if self._stopping and ready is None:
                    return None
                self._lock.wait(None if wake_at is None else max(0.0, wake_at - now))

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run_counted(batch.tasks)

    def _run_counted(self, tasks: list) -> None:
        """Runs one batch that holds a running slot; every task is finished, the slot freed."""
        try:
            self._run_batch(tasks)
        except BaseException as e:  # noqa: BLE001 - never leave a client waiting.
            for task in tasks:
                if not task._done.is_set():
                    task.finish(error=e)
        finally:
            with self._lock:
                self._running -= 1
                self._lock.notify_all()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Runs what is queued, then ends the batch threads; new tasks are refused."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


# ----------------------------------------------------------------------------------------
# Merging inputs and splitting outputs.


def pad_value(dtype: np.dtype) -> Any:
    """The export's padding: "" for strings, -1 for integers, 0 otherwise."""
    if dtype == object or dtype.kind in "SU":
        return b""
    if dtype.kind in "iu":
        return -1
    return 0


def merge_inputs(inputs: Sequence[dict[str, np.ndarray]], pad_names: set[str],
                 padded_rows: int) -> dict[str, np.ndarray]:
    """Concatenates requests' inputs along the batch dimension.

    Inputs in pad_names (rows of words) are padded with "" to the widest request first;
    the batch is then padded to padded_rows by repeating its first row (TF Serving's
    allowed_batch_sizes padding).
    """
    merged = {}
    for name in inputs[0]:
        arrays = [x[name] for x in inputs]
        if name in pad_names and arrays[0].ndim >= 2:
            width = max(a.shape[1] for a in arrays)
            arrays = [a if a.shape[1] == width else np.pad(
                a, [(0, 0), (0, width - a.shape[1])] + [(0, 0)] * (a.ndim - 2),
                constant_values=pad_value(a.dtype)) for a in arrays]
        array = np.concatenate(arrays, axis=0)
        if padded_rows > len(array):
            array = np.concatenate([array] + [array[:1]] * (padded_rows - len(array)))
        merged[name] = array
    return merged


def split_outputs(outputs: dict[str, np.ndarray], row_counts: Sequence[int],
                  widths: Sequence[int | None], batch_width: int | None
                  ) -> list[dict[str, np.ndarray]]:
    """Splits a merged call's outputs back into one dict per request, in order.

    An output [rows, batch_width, ...] (padded to the batch's longest sentence) is cut back
    to each request's own longest sentence (widths[i]), and one padded to the batch's
    largest count (`export_format.COUNTED_OUTPUTS`) to the request's own, so that a request
    gets exactly what it would have got alone.

    Raises:
      ValueError: an output that is not batch-major.
    """
    total = sum(row_counts)
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] < total:
            raise ValueError(f"output '{name}' has shape {list(value.shape)}, which is not "
                             "batch-major, so it cannot be split back into requests")
    results, start = [], 0
    for rows, width in zip(row_counts, widths):
        result = {}
        for name, value in outputs.items():
            part = value[start:start + rows]
            if (width is not None and batch_width is not None and part.ndim >= 2
                    and part.shape[1] == batch_width
                    and name not in export_format.NOT_WORD_WIDE_OUTPUTS):
                part = part[:, :width]
            count_name = export_format.COUNTED_OUTPUTS.get(name)
            if count_name in outputs and part.ndim >= 2:
                counts = outputs[count_name][start:start + rows]
                part = part[:, :int(counts.max(initial=0))]
            result[name] = part
        results.append(result)
        start += rows
    return results


def join_outputs(parts: Sequence[dict[str, np.ndarray]], width: int | None
                 ) -> dict[str, np.ndarray]:
    """Joins the outputs of a split request's slices (each cut to its own width), padded
    to the request's width (or, for outputs without one, such as a text's [sentences,
    words], to the slices' largest shape)."""
    if len(parts) == 1:
        return parts[0]
    joined = {}
    for name in parts[0]:
        arrays = [p[name] for p in parts]
        if arrays[0].ndim >= 2 and any(a.shape[1:] != arrays[0].shape[1:] for a in arrays):
            target = np.max([a.shape[1:] for a in arrays], axis=0)
            if width is not None and name not in export_format.NOT_WORD_WIDE_OUTPUTS:
                target[0] = max(target[0], width)
            arrays = [np.pad(a, [(0, 0)] + [(0, int(t) - size) for size, t in
                                            zip(a.shape[1:], target)],
                             constant_values=pad_value(a.dtype)) for a in arrays]
        joined[name] = np.concatenate(arrays, axis=0)
    return joined
