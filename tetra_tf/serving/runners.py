"""Runners: how a checked request reaches the model, as its own call or merged with others."""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from tetra_tf.contract import export_format
from tetra_tf.serving import batching
from tetra_tf.serving.admission import Prepared
from tetra_tf.serving.errors import RequestError
from tetra_tf.serving.metrics import Metrics
from tetra_tf.serving.servable import ServedModel

Runner = Callable[[ServedModel, Prepared], dict[str, np.ndarray]]


class DirectRunner:
    """Runs each request as its own model call (no cross-request batching)."""

    def __init__(self, metrics: Metrics | None = None) -> None:
        self._metrics = metrics

    def __call__(self, model: ServedModel, prepared: Prepared) -> dict[str, np.ndarray]:
        if self._metrics:
            self._metrics.batch_size.observe(prepared.batch_size)
        return model.call(prepared.signature_name, prepared.inputs)

    def unload(self, model: ServedModel) -> None:
        pass


class BatchingRunner:
    """Merges concurrent requests into model calls (TF Serving's --enable_batching).

    One scheduler per loaded version (of each model) and one queue per signature and input
    shape. A
    request over a batch's rows (or over --max_pieces_per_request merged) is split into
    slices. A call is padded with copies of its first row up to the next of
    allowed_batch_sizes, except for `export_format.ROW_BOUNDED_SIGNATURES`, whose bounds
    count the rows. When a merged call is refused as an invalid argument, its requests
    run again one by one, so that a request that fails only fails itself (a request that
    fits the bound alone runs alone); when it fails otherwise (an internal failure),
    every request of the call gets that failure, without running again.
    """

    def __init__(self, params: batching.BatchingParameters, word_inputs: tuple[str, ...],
                 metrics: Metrics | None = None) -> None:
        """Args:
          word_inputs: inputs of word rows, padded with "" to the widest when merged
            (parse_constrained's constraint inputs are padded so too, with −1 or "").
        """
        self.params = params
        self._word_inputs = set(word_inputs) | set(export_format.CONSTRAINT_INPUTS)
        self._metrics = metrics
        self._lock = threading.Lock()
        self._schedulers: dict[tuple[str, int], batching.BatchScheduler] = {}
        if metrics:
            metrics.queue_depth.set_function(self.queued_rows)

    def queued_rows(self) -> int:
        with self._lock:
            schedulers = list(self._schedulers.values())
        return sum(s.queued_rows() for s in schedulers)

    def _scheduler(self, model: ServedModel) -> batching.BatchScheduler:
        with self._lock:
            scheduler = self._schedulers.get((model.name, model.version))
            if scheduler is None:
                max_cost = (model.limits.max_pieces_per_request or None
                            if model.piece_counter is not None else None)
                scheduler = batching.BatchScheduler(
                    self.params, lambda tasks: self._run_batch(model, tasks), max_cost,
                    name=f"batch-{model.name}-v{model.version}")
                self._schedulers[(model.name, model.version)] = scheduler
            return scheduler

    def unload(self, model: ServedModel) -> None:
        with self._lock:
            scheduler = self._schedulers.pop((model.name, model.version), None)
        if scheduler is not None:
            scheduler.stop()

    def __call__(self, model: ServedModel, prepared: Prepared) -> dict[str, np.ndarray]:
        rows = prepared.batch_size
        if any(value.ndim == 0 or value.shape[0] != rows
               for value in prepared.inputs.values()):
            raise RequestError("with --enable_batching, every input needs the same first "
                               "(batch) dimension")
        if rows > self.params.execution_batch_size and \
                not self.params.enable_large_batch_splitting:
            raise RequestError(f"Task size {rows} is larger than maximum input batch size "
                               f"{self.params.execution_batch_size}")
        key = (prepared.signature_name,) + tuple(sorted(
            (name, value.shape[1:] if name not in self._word_inputs else value.ndim)
            for name, value in prepared.inputs.items()))
        tasks = []
        for start, stop in self._slices(prepared, model.limits.max_pieces_per_request):
            widths = prepared.row_widths
            tasks.append(batching.Task(
                key, stop - start,
                int(prepared.row_pieces[start:stop].sum()) if prepared.row_pieces is not None
                else 0,
                ({name: value[start:stop] for name, value in prepared.inputs.items()},
                 int(widths[start:stop].max()) if widths is not None else None)))
        scheduler = self._scheduler(model)
        try:
            for task in tasks:  # A split request's slices all go to the batch threads.
                scheduler.submit(task, inline=len(tasks) == 1)
        except batching.QueueFullError as e:
            raise RequestError(f"Unavailable: {e}", 503) from None
        parts = [task.wait() for task in tasks]
        width = int(prepared.row_widths.max()) if prepared.row_widths is not None else None
        return batching.join_outputs(parts, width)

    def _slices(self, prepared: Prepared, max_pieces: int) -> list[tuple[int, int]]:
        """Row ranges of at most a batch's rows and (with pieces) the pieces budget."""
        max_rows = self.params.execution_batch_size
        pieces = prepared.row_pieces
        slices, start, cost = [], 0, 0
        for row in range(prepared.batch_size):
            row_cost = int(pieces[row]) if pieces is not None else 0  # counted: max_pieces > 0
            if row > start and (row - start >= max_rows or (
                    pieces is not None and cost + row_cost > max_pieces)):
                slices.append((start, row))
                start, cost = row, 0
            cost += row_cost
        slices.append((start, prepared.batch_size))
        return slices

    def _run_batch(self, model: ServedModel, tasks: list[batching.Task]) -> None:
        rows = sum(task.rows for task in tasks)
        signature_name = tasks[0].key[0]
        padded_rows = (rows if signature_name in export_format.ROW_BOUNDED_SIGNATURES
                       else self.params.padded_size(rows))
        inputs = batching.merge_inputs([task.payload[0] for task in tasks],
                                       self._word_inputs, padded_rows)
        if self._metrics:
            self._metrics.batch_size.observe(padded_rows)
        try:
            outputs = model.call(signature_name, inputs)
            if len(tasks) == 1 and padded_rows == rows:
                parts = [outputs]  # A batch of one request: its outputs as they are.
            else:
                widths = [task.payload[1] for task in tasks]
                batch_width = max(widths) if None not in widths else None
                parts = batching.split_outputs(outputs, [task.rows for task in tasks],
                                               widths, batch_width)
        except (RequestError, ValueError) as e:
            if isinstance(e, ValueError):
                e = RequestError(f"Internal: {e}", 500)
            if e.status == 400 and len(tasks) > 1:
                for task in tasks:  # Find the request(s) at fault: each one alone.
                    self._run_batch(model, [task])
                return
            for task in tasks:  # An internal failure fails the call's requests, once.
                task.finish(error=e)
            return
        for task, part in zip(tasks, parts):
            task.finish(part)
