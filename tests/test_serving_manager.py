"""Tests for the server's model management and runners (tetra_tf.serving.manager,
.runners) with stand-in models: version discovery, retried loads, warm-up before the switch,
and which failures of a merged batch run again."""

import tetra_tf  # noqa: F401  (legacy Keras before TensorFlow)

import concurrent.futures
import os
import threading
import time

import numpy as np
import pytest

from tetra_tf.serving import admission, batching
from tetra_tf.serving.errors import RequestError
from tetra_tf.serving.manager import ModelManager, find_latest_version
from tetra_tf.serving.runners import BatchingRunner


def _version_dir(base, name, files=("saved_model.pb",)):
    directory = base / name
    directory.mkdir()
    for file in files:
        (directory / file).write_bytes(b"x")
    return directory


def test_version_names_are_ascii_digits(tmp_path):
    """"²" passes str.isdigit() but not int(): it is not a version, and no error."""
    _version_dir(tmp_path, "1")
    _version_dir(tmp_path, "²")
    _version_dir(tmp_path, "٣")  # ARABIC-INDIC DIGIT THREE: int() takes it, TF Serving not.
    assert find_latest_version(str(tmp_path)) == (1, str(tmp_path / "1"))
    _version_dir(tmp_path, "2")
    assert find_latest_version(str(tmp_path))[0] == 2


class _Model:
    def __init__(self, version, events):
        self.name, self.version, self._events = "toy", version, events

    def warm_up(self):
        self._events.append(("warm_up", self.version))


def test_failed_version_is_retried_when_any_of_its_files_changes(tmp_path):
    events, attempts = [], []
    _version_dir(tmp_path, "1")
    half_copied = _version_dir(tmp_path, "2", files=("saved_model.pb",))

    def load(version, export_dir):
        attempts.append(version)
        if not os.path.isfile(os.path.join(export_dir, "variables", "variables.index")):
            raise OSError("variables missing")
        return _Model(version, events)

    manager = ModelManager(_Model(1, events), load,
                           on_switch=lambda model: events.append(("switch", model.version)))
    manager.poll(str(tmp_path))
    manager.poll(str(tmp_path))  # Unchanged: not tried again.
    assert attempts == [2] and manager.current.version == 1
    # The copy goes on: saved_model.pb is unchanged, its variables arrive.
    (half_copied / "variables").mkdir()
    (half_copied / "variables" / "variables.index").write_bytes(b"x")
    manager.poll(str(tmp_path))
    assert attempts == [2, 2] and manager.current.version == 2
    # Warmed up before requests were switched to it.
    assert events == [("warm_up", 2), ("switch", 2)]


class _FailingModel:
    """Counts its calls; each call fails with the given status. A call holding the
    sentence "hold" first waits for `release` (it keeps the batch slot busy)."""

    version = 1
    piece_counter = None
    limits = admission.ModelLimits.of(admission.Limits(), {})

    def __init__(self, status):
        self.status, self.calls = status, 0
        self.release = threading.Event()

    def call(self, signature_name, inputs):
        self.calls += 1
        if b"hold" in inputs["sentences"].tolist():
            self.release.wait(60)
        raise RequestError("Internal: boom" if self.status == 500 else "Invalid argument: x",
                           self.status)


@pytest.mark.parametrize("status, calls", [(500, 1), (400, 3)])
def test_merged_batch_failure_reruns_only_invalid_arguments(status, calls):
    """Two requests merged into one call: an invalid argument is looked for request by
    request (1 + 2 calls), an internal failure fails both at once (1 call)."""
    params = batching.BatchingParameters(max_batch_size=8, batch_timeout_micros=300_000,
                                         max_enqueued_batches=4, num_batch_threads=1)
    runner = BatchingRunner(params, ("words",))
    model = _FailingModel(status)

    def request(text):
        inputs = {"sentences": np.array([text.encode()], dtype=object)}
        with pytest.raises(RequestError) as error:
            runner(model, admission.Prepared("serving_default", inputs, 1))
        return error.value.status

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        # An idle scheduler runs a lone request at once: "hold" takes the only batch slot,
        # so that "a" and "b" wait in the queue together and are merged.
        holder = pool.submit(request, "hold")
        deadline = time.monotonic() + 60
        while model.calls < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        merged = [pool.submit(request, text) for text in ("a", "b")]
        while runner.queued_rows() < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        model.release.set()
        assert holder.result() == status
        assert [future.result() for future in merged] == [status, status]
    runner.unload(model)
    assert model.calls - 1 == calls  # The holder's own call aside.
