"""Model management: version discovery under a base path, the served versions, hot reload.

As TF Serving's file system source and manager: the highest numbered version directory
holding a SavedModel is served; with polling, a new one is loaded and warmed up in the
background, then new requests switch to it, and the old one is unloaded after its last
request. A version that fails to load is retried when its files change.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Callable, Iterator

from absl import logging as absl_logging

from tetra_tf.errors import ExportError
from tetra_tf.serving.errors import RequestError, first_line, log_safe
from tetra_tf.export_format import saved_model_file
from tetra_tf.serving.servable import ServedModel

MAX_INT64 = (1 << 63) - 1


def is_version_name(name: str) -> bool:
    """Whether a directory name is a version number: ASCII digits only ("²" is not)."""
    return name.isascii() and name.isdigit()


def find_latest_version(base_path: str) -> tuple[int, str]:
    """Returns (version, export_dir) of the highest numeric version holding a SavedModel.

    Raises:
      ExportError: base_path is not a directory or holds no version directory with a
        saved_model.pb (or .pbtxt).
    """
    if not os.path.isdir(base_path):
        raise ExportError(f"--model_base_path {base_path!r} is not a directory")
    if saved_model_file(base_path) is not None:
        raise ExportError(f"{base_path!r} is a SavedModel itself; --model_base_path is the "
                         "directory above its numbered version directories")
    versions = [(int(entry), os.path.join(base_path, entry))
                for entry in os.listdir(base_path)
                if is_version_name(entry)
                and saved_model_file(os.path.join(base_path, entry)) is not None]
    if not versions:
        raise ExportError(f"no servable version under {base_path!r} (expected numbered "
                         "directories such as 1/saved_model.pb)")
    return max(versions)


def parse_version(text: str) -> int:
    """A version number from a request path (TF Serving's versions are int64).

    Raises:
      RequestError: not an int64 (400), e.g. a 5,000-digit number.
    """
    if not is_version_name(text) or len(text) > 19 or int(text) > MAX_INT64:
        raise RequestError(f"Invalid version {log_safe(text, 40)!s}: not an int64")
    return int(text)


def files_signature(export_dir: str) -> tuple[tuple[str, int, int], ...]:
    """Every file under export_dir with its mtime and size: changes when a copy goes on."""
    entries = []
    for root, _, names in os.walk(export_dir):
        for name in names:
            path = os.path.join(root, name)
            try:
                stat = os.stat(path)
            except OSError:
                continue
            entries.append((os.path.relpath(path, export_dir), stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(entries))


class ModelManager:
    """The served versions of one model: the one new requests get, and lookups by version.

    Requests hold a version while they run (acquire). With a base path to watch
    (TF Serving's --file_system_poll_wait_seconds), a new highest version is loaded in the
    background, new requests switch to it, and the old one is unloaded once its last
    request has finished; a version that fails to load is logged, the old one keeps
    serving, and the load is tried again once the version's files change.
    """

    def __init__(self, model: ServedModel,
                 load: Callable[[int, str], ServedModel] | None = None,
                 on_unload: Callable[[ServedModel], None] | None = None,
                 on_switch: Callable[[ServedModel], None] | None = None) -> None:
        self.name = model.name
        self._lock = threading.Condition()
        self._current = model
        self._in_flight: dict[int, int] = {model.version: 0}
        self._loaded: dict[int, ServedModel] = {model.version: model}
        self._load = load
        self._on_unload = on_unload
        self._on_switch = on_switch
        self._failed: dict[int, tuple] = {}  # version → its files_signature at the failure
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    @property
    def current(self) -> ServedModel:
        with self._lock:
            return self._current

    @contextlib.contextmanager
    def acquire(self, model_name: str, number: int | None,
                missing: str = "Servable not found for request: {spec}"
                ) -> Iterator[ServedModel]:
        """Yields the requested version (the current one if None) while a request runs.

        Raises:
          RequestError: unknown model or version (404).
        """
        with self._lock:
            if model_name != self.name:
                raise RequestError(missing.format(spec=f"Latest({model_name})"), 404)
            model = self._current
            if number is not None and number != model.version:
                raise RequestError(missing.format(
                    spec=f"Specific({model_name}, {number})"), 404)
            self._in_flight[model.version] += 1
        try:
            yield model
        finally:
            with self._lock:
                self._in_flight[model.version] -= 1
                self._lock.notify_all()

    def status_json(self, model_name: str, version: int | None) -> dict[str, Any]:
        if model_name != self.name:
            raise RequestError(f"Could not find any versions of model {model_name}", 404)
        current = self.current
        if version is not None and version != current.version:
            raise RequestError(f"Could not find version {version} of model {model_name}",
                               404)
        return current.status_json()

    def watch(self, base_path: str, poll_wait_s: float) -> None:
        """Polls base_path every poll_wait_s seconds for a new highest version."""
        def poll_forever() -> None:
            while not self._stop.wait(poll_wait_s):
                try:
                    self.poll(base_path)
                except Exception as e:  # noqa: BLE001 - keep serving; say why in one line.
                    absl_logging.error("polling %s failed: %s: %s", base_path,
                                       type(e).__name__, first_line(str(e))[:500])

        self._poller = threading.Thread(target=poll_forever, name="version-poller",
                                        daemon=True)
        self._poller.start()

    def stop(self) -> None:
        self._stop.set()

    def poll(self, base_path: str) -> None:
        """Loads, warms up and switches to the highest version under base_path, if it is
        new (and, if it failed to load before, its files have changed since)."""
        try:
            version, export_dir = find_latest_version(base_path)
        except ExportError:
            return  # No version there (for now): keep serving the loaded one.
        if version == self.current.version or self._load is None:
            return
        stamp = files_signature(export_dir)
        if self._failed.get(version) == stamp:
            return  # Already failed to load, and unchanged since.
        absl_logging.info("loading model %r version %d from %s", self.name, version,
                          export_dir)
        try:
            model = self._load(version, export_dir)
            model.warm_up()
        except Exception as e:  # noqa: BLE001 - the old version keeps serving.
            self._failed[version] = stamp
            absl_logging.error("failed to load version %d from %s, still serving version "
                               "%d: %s: %s", version, export_dir, self.current.version,
                               type(e).__name__, first_line(str(e))[:500])
            return
        with self._lock:
            old = self._current
            self._current = model
            self._loaded[model.version] = model
            self._in_flight.setdefault(model.version, 0)
        if self._on_switch:
            self._on_switch(model)
        absl_logging.info("serving version %d; unloading version %d once its requests "
                          "finish", model.version, old.version)
        with self._lock:
            self._lock.wait_for(lambda: self._in_flight.get(old.version, 0) == 0)
            del self._loaded[old.version]
            del self._in_flight[old.version]
        if self._on_unload:
            self._on_unload(old)
        absl_logging.info("unloaded version %d", old.version)
