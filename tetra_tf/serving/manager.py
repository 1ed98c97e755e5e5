"""Model management: the served models, their versions and labels, hot reload.

As TF Serving's ServerCore, file system source and manager: `Models` serves the models of
a ModelServerConfig (model_config.py), and reloads to a new config; each model's
`ModelManager` serves the numbered version directories (holding a SavedModel) that its
version policy names (by default the highest). A new version is loaded and warmed up in
the background, then new requests switch to it, and an old one is unloaded after its last
request; a version that fails to load is retried when its files change, and the versions
already loaded keep serving (TF Serving's availability preserving policy).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import threading
from typing import Any, Callable, ContextManager, Iterator, Union

from absl import logging as absl_logging

from tetra_tf.contract.export_format import saved_model_file
from tetra_tf.errors import ExportError
from tetra_tf.serving import model_config
from tetra_tf.serving.errors import RequestError, first_line, log_safe
from tetra_tf.serving.model_config import ConfigError
from tetra_tf.serving.servable import ServedModel

MAX_INT64 = (1 << 63) - 1


def is_version_name(name: str) -> bool:
    """Whether a directory name is a version number: ASCII digits only ("²" is not)."""
    return name.isascii() and name.isdigit()


def versions_on_disk(base_path: str) -> dict[int, str]:
    """{version: export_dir} of the numeric version directories holding a SavedModel.

    Raises:
      ExportError: base_path is not a directory or holds no version directory with a
        saved_model.pb (or .pbtxt).
    """
    if not os.path.isdir(base_path):
        raise ExportError(f"--model_base_path {base_path!r} is not a directory")
    if saved_model_file(base_path) is not None:
        raise ExportError(f"{base_path!r} is a SavedModel itself; --model_base_path is the "
                         "directory above its numbered version directories")
    versions = {int(entry): os.path.join(base_path, entry)
                for entry in os.listdir(base_path)
                if is_version_name(entry) and int(entry) <= MAX_INT64
                and saved_model_file(os.path.join(base_path, entry)) is not None}
    if not versions:
        raise ExportError(f"no servable version under {base_path!r} (expected numbered "
                         "directories such as 1/saved_model.pb)")
    return versions


def find_latest_version(base_path: str) -> tuple[int, str]:
    """Returns (version, export_dir) of the highest numeric version holding a SavedModel.

    Raises:
      ExportError: as `versions_on_disk`.
    """
    return max(versions_on_disk(base_path).items())


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


@dataclasses.dataclass(frozen=True)
class VersionLabel:
    """A version asked for by label (gRPC's model_spec.version_label, REST's
    /labels/LABEL); the model config maps each label to a version."""

    name: str


# What a request asks for: a version number, a label, or None for the latest version.
VersionChoice = Union[int, VersionLabel, None]

# TF Serving's ModelVersionStatus states that a version of this server goes through.
LOADING, AVAILABLE, UNLOADING, END = "LOADING", "AVAILABLE", "UNLOADING", "END"


@dataclasses.dataclass
class _Version:
    state: str
    model: ServedModel | None = None
    in_flight: int = 0
    error: str = ""  # why it failed to load (its state is then END)


def _servable_spec(model_name: str, number: int | None) -> str:
    """A request's servable as TF Serving names it in NOT_FOUND answers."""
    return (f"Latest({model_name})" if number is None
            else f"Specific({model_name}, {number})")


class ModelManager:
    """The versions of one model: the ones served, lookups by version or label, reload.

    Requests hold a version while they run (acquire); the latest AVAILABLE version serves
    requests that name none. `poll` loads, warms up and serves the versions on disk that
    the version policy names (highest first) and then unloads the ones it no longer names
    once their last request has finished, keeping at least one version available: a
    version that fails to load is logged, the loaded ones keep serving, and the load is
    tried again once the version's files change.
    """

    def __init__(self, model: ServedModel | None = None,
                 load: Callable[[int, str], ServedModel] | None = None,
                 on_unload: Callable[[ServedModel], None] | None = None,
                 on_switch: Callable[[ServedModel], None] | None = None, *,
                 name: str | None = None, base_path: str | None = None,
                 policy: Any = None) -> None:
        """Args:
          model: a version already loaded and warmed up, served from the start.
          load: loads (version, export_dir); poll warms it up.
          on_unload: called with each version unloaded (after its last request).
          on_switch: called with each version that becomes the latest available one.
          name: the model's name (model's, if None).
          base_path: the directory of numbered versions that poll() reads.
          policy: its ServableVersionPolicy (model_config.py); None: the latest version.
        """
        if model is None and name is None:
            raise ValueError("ModelManager needs a model or a name")
        self.name = name if name is not None else model.name
        self.base_path = base_path
        self.policy = policy
        self.labels: dict[str, int] = {}  # replaced whole by `Models.apply_config`
        self.served = True  # False once the config no longer lists the model
        self._lock = threading.Condition()
        self._versions: dict[int, _Version] = {}
        if model is not None:
            self._versions[model.version] = _Version(AVAILABLE, model)
        self._load = load
        self._on_unload = on_unload
        self._on_switch = on_switch
        self._failed: dict[int, tuple[tuple, Exception]] = {}  # at the failure: files, error
        self._work = threading.Lock()  # one poll at a time

    def _latest(self) -> int | None:
        available = [number for number, entry in self._versions.items()
                     if entry.state == AVAILABLE]
        return max(available) if available else None

    @property
    def current(self) -> ServedModel:
        """The latest available version (the one requests naming none get).

        Raises:
          RequestError: no version is available (404).
        """
        with self._lock:
            number = self._latest()
            if number is None:
                raise RequestError(f"Servable not found for request: "
                                   f"{_servable_spec(self.name, None)}", 404)
            return self._versions[number].model

    def available_versions(self) -> list[int]:
        """The AVAILABLE version numbers, lowest first."""
        with self._lock:
            return sorted(number for number, entry in self._versions.items()
                          if entry.state == AVAILABLE)

    def _number(self, version: VersionChoice) -> int | None:
        """A label's version (the number itself, or None, otherwise).

        Raises:
          RequestError: an unknown label (400, TF Serving's INVALID_ARGUMENT).
        """
        if not isinstance(version, VersionLabel):
            return version
        number = self.labels.get(version.name)
        if number is None:
            raise RequestError("Unrecognized servable version label: "
                               f"{log_safe(version.name, 100)}")
        return number

    @contextlib.contextmanager
    def acquire(self, model_name: str, version: VersionChoice = None
                ) -> Iterator[ServedModel]:
        """Yields the requested version (by number, by label, or the latest if None)
        while a request runs: it is not unloaded before the request ends.

        Raises:
          RequestError: an unknown label (400); an unknown model, or a version that is
            not available (404).
        """
        with self._lock:
            number = self._number(version)
            entry = None
            if model_name == self.name and self.served:
                if number is None:
                    latest = self._latest()
                    entry = self._versions[latest] if latest is not None else None
                else:
                    entry = self._versions.get(number)
            if entry is None or entry.state != AVAILABLE:
                raise RequestError("Servable not found for request: "
                                   f"{_servable_spec(model_name, number)}", 404)
            entry.in_flight += 1
        try:
            yield entry.model
        finally:
            with self._lock:
                entry.in_flight -= 1
                self._lock.notify_all()

    def status_json(self, model_name: str, version: VersionChoice = None
                    ) -> dict[str, Any]:
        """TF Serving's GetModelStatus answer as JSON: the state of every version this
        model has had (LOADING, AVAILABLE, UNLOADING, END), highest first, or of one.

        Raises:
          RequestError: an unknown label (400); no such model or version (404).
        """
        with self._lock:
            number = self._number(version)
            entries = sorted(self._versions.items(), reverse=True) \
                if model_name == self.name else []
            if number is not None:
                entries = [(n, entry) for n, entry in entries if n == number]
                if not entries:
                    raise RequestError(f"Could not find version {number} of model "
                                       f"{model_name}", 404)
            if not entries:
                raise RequestError(f"Could not find any versions of model {model_name}",
                                   404)
            return {"model_version_status": [{
                "version": str(n), "state": entry.state,
                "status": {"error_code": "UNKNOWN" if entry.error else "OK",
                           "error_message": entry.error}} for n, entry in entries]}

    def poll(self, base_path: str | None = None) -> Exception | None:
        """Serves the versions under base_path (this model's, if None) that the policy
        names: loads and warms up each new one (highest first; not again, after a
        failure, until its files change), then unloads the versions it no longer names
        once their requests finish, keeping one available if none of those it names is.

        Returns:
          Why a version it names is not available (the last load failure, or no version
          on disk), or None.
        """
        base_path = base_path if base_path is not None else self.base_path
        with self._work:
            try:
                on_disk = versions_on_disk(base_path)
            except ExportError as e:
                return e  # No version there (for now): keep serving the loaded ones.
            aspired = model_config.policy_versions(on_disk, self.policy)
            if not aspired:
                absl_logging.warning(
                    "No versions of servable %s found under base path %s (its version "
                    "policy names none of %s)", self.name, base_path, sorted(on_disk))
                return ExportError(f"none of the versions under {base_path!r} is one that "
                                   f"model {self.name}'s version policy names")
            error = None
            for number in sorted(aspired, reverse=True):
                with self._lock:
                    entry = self._versions.get(number)
                    if entry is not None and entry.state != END:
                        continue  # Loading, available, or still unloading.
                stamp = files_signature(on_disk[number])
                failed = self._failed.get(number)
                if failed is not None and failed[0] == stamp:
                    error = failed[1]  # Already failed to load, and unchanged since.
                elif self._load is not None:
                    error = self._load_version(number, on_disk[number], stamp) or error
            self._unload_unaspired(aspired)
            return error

    def _load_version(self, number: int, export_dir: str, stamp: tuple) -> Exception | None:
        """Loads and warms up one version, then serves it; returns why not, if it fails."""
        absl_logging.info("loading model %r version %d from %s", self.name, number,
                          export_dir)
        with self._lock:
            self._versions[number] = _Version(LOADING)
        try:
            model = self._load(number, export_dir)
            model.warm_up()
        except Exception as e:  # noqa: BLE001 - the loaded versions keep serving.
            self._failed[number] = (stamp, e)
            message = f"{type(e).__name__}: {first_line(str(e))[:500]}"
            with self._lock:
                self._versions[number] = _Version(END, error=message)
                latest = self._latest()
            absl_logging.error("model %r: failed to load version %d from %s, still serving "
                               "%s: %s", self.name, number, export_dir,
                               f"version {latest}" if latest is not None else "no version",
                               message)
            return e
        self._failed.pop(number, None)
        with self._lock:
            self._versions[number] = _Version(AVAILABLE, model)
            switched = self._latest() == number
        if switched and self._on_switch:
            self._on_switch(model)
        absl_logging.info("model %r: %s version %d", self.name,
                          "serving" if switched else "also serving", number)
        return None

    def _unload_unaspired(self, aspired: set[int]) -> None:
        """Unloads the available versions not in aspired, unless none in aspired is
        available: then all of them but the highest."""
        with self._lock:
            ready = {n for n, entry in self._versions.items() if entry.state == AVAILABLE}
            unaspired = sorted(ready - aspired)
            if not ready & aspired:
                unaspired = unaspired[:-1]
            for number in unaspired:
                self._versions[number].state = UNLOADING
        for number in unaspired:
            self._unload_after_requests(number)

    def unload_all(self) -> None:
        """Stops serving this model: no new requests, each version unloaded after its
        last request (the model left the config)."""
        with self._work:
            with self._lock:
                self.served = False
                self.labels = {}
                numbers = [n for n, entry in self._versions.items()
                           if entry.state == AVAILABLE]
                for number in numbers:
                    self._versions[number].state = UNLOADING
            for number in numbers:
                self._unload_after_requests(number)

    def _unload_after_requests(self, number: int) -> None:
        """On a thread of its own: waits for the UNLOADING version's requests to end,
        then unloads it."""
        entry = self._versions[number]
        absl_logging.info("model %r: unloading version %d once its requests finish",
                          self.name, number)

        def unload() -> None:
            with self._lock:
                self._lock.wait_for(lambda: entry.in_flight == 0)
                model, entry.model, entry.state = entry.model, None, END
            if self._on_unload:
                self._on_unload(model)
            absl_logging.info("model %r: unloaded version %d", self.name, number)

        threading.Thread(target=unload, name=f"unload-{self.name}-{number}",
                         daemon=True).start()


class Models:
    """The served models (TF Serving's ServerCore): the models of a ModelServerConfig,
    each a `ModelManager`, replaced as a whole by a new config (`apply_config`: a
    --model_config_file, its poll, or ModelService.HandleReloadConfigRequest)."""

    def __init__(self, load: Callable[[str, int, str], ServedModel],
                 on_unload: Callable[[ServedModel], None] | None = None,
                 on_switch: Callable[[ServedModel], None] | None = None,
                 allow_version_labels_for_unavailable_models: bool = False) -> None:
        """Args:
          load: loads (model name, version, export_dir).
          on_unload, on_switch: as `ModelManager`'s, for every model.
          allow_version_labels_for_unavailable_models: TF Serving's flag: a label that
            is new (or unchanged) may name a version that is not available yet.
        """
        self._load = load
        self._on_unload = on_unload
        self._on_switch = on_switch
        self._allow_unavailable_labels = allow_version_labels_for_unavailable_models
        # By name, removed models too (for their status); replaced whole, read unlocked.
        self._models: dict[str, ModelManager] = {}
        self._config: Any = None
        self._work = threading.Lock()  # one config change or poll at a time
        self._stop = threading.Event()

    @property
    def config(self) -> Any:
        """The ModelServerConfig in force (None before the first)."""
        return self._config

    def served(self) -> dict[str, list[int]]:
        """{model name: its available versions} for every model of the config."""
        return {name: manager.available_versions()
                for name, manager in self._models.items() if manager.served}

    def manager(self, model_name: str) -> ModelManager | None:
        """The model's manager while the config lists it."""
        manager = self._models.get(model_name)
        return manager if manager is not None and manager.served else None

    def acquire(self, model_name: str, version: VersionChoice = None
                ) -> ContextManager[ServedModel]:
        """As `ModelManager.acquire`, for any served model."""
        manager = self.manager(model_name)
        if manager is None:
            if isinstance(version, VersionLabel):
                raise RequestError("Unrecognized servable version label: "
                                   f"{log_safe(version.name, 100)}")
            raise RequestError("Servable not found for request: "
                               f"{_servable_spec(model_name, version)}", 404)
        return manager.acquire(model_name, version)

    def status_json(self, model_name: str, version: VersionChoice = None) -> dict[str, Any]:
        """As `ModelManager.status_json`; a model no longer served keeps its versions'
        states (END once unloaded), as TF Serving's."""
        manager = self._models.get(model_name)
        if manager is None:
            raise RequestError(f"Could not find any versions of model {model_name}", 404)
        return manager.status_json(model_name, version)

    def apply_config(self, config: Any) -> dict[str, Exception]:
        """Serves exactly the config's models (TF Serving's ServerCore::ReloadConfig):
        checks it, sets the labels, loads new models, applies changed version policies
        and base paths, and unloads models no longer listed once their requests finish.
        Requests in progress are never dropped.

        Returns:
          {model name: why}: the new models that did not become available.

        Raises:
          ConfigError: the config was refused (nothing changed): INVALID_ARGUMENT for a
            bad config, FAILED_PRECONDITION for a label naming a version that is not
            available.
        """
        stored = type(config)()
        stored.CopyFrom(config)
        with self._work:
            model_config.check_model_server_config(stored, self._config)
            if stored.WhichOneof("config") is None:
                absl_logging.info("Taking no action for empty config.")
                return {}
            labels = {model.name: self._checked_labels(model)
                      for model in stored.model_config_list.config}
            old, models, added = self._models, dict(self._models), []
            for model in stored.model_config_list.config:
                manager = self.manager(model.name)
                if manager is None:
                    manager = ModelManager(
                        name=model.name, load=functools.partial(self._load, model.name),
                        on_unload=self._on_unload, on_switch=self._on_switch)
                    added.append(model.name)
                manager.base_path = model.base_path
                manager.policy = model.model_version_policy
                manager.labels = labels[model.name]
                models[model.name] = manager
            self._models, self._config = models, stored
            for name, manager in old.items():
                if manager.served and name not in labels:
                    absl_logging.info("model %r left the config: unloading it", name)
                    manager.unload_all()
            failures: dict[str, Exception] = {}
            for model in stored.model_config_list.config:
                error = models[model.name].poll()
                if model.name in added and not models[model.name].available_versions():
                    failures[model.name] = error or ExportError(
                        f"no version of model {model.name} became available")
            return failures

    def _checked_labels(self, model: Any) -> dict[str, int]:
        """A ModelConfig's version labels, each naming an available version (or, with
        allow_version_labels_for_unavailable_models, any version if the label is new or
        unchanged), as TF Serving's ServerCore::UpdateModelVersionLabelMap.

        Raises:
          ConfigError: FAILED_PRECONDITION naming the first label that may not be set.
        """
        manager = self.manager(model.name)
        available = manager.available_versions() if manager is not None else []
        for label, number in sorted(model.version_labels.items()):
            existing = manager.labels.get(label) if manager is not None else None
            allowed = self._allow_unavailable_labels and existing in (None, number)
            if not allowed and number not in available:
                raise ConfigError(f"Request to assign label to version {number} of model "
                                  f"{model.name}, which is not currently available for "
                                  "inference", "FAILED_PRECONDITION")
        return dict(model.version_labels)

    def poll(self) -> None:
        """Polls every served model's base path for its versions (`ModelManager.poll`)."""
        with self._work:
            for manager in self._models.values():
                if manager.served:
                    manager.poll()

    def _every(self, wait_s: float, name: str, work: Callable[[], None]) -> None:
        """Runs work every wait_s seconds on a daemon thread until stop(), logging its
        failures in one line."""
        def loop() -> None:
            while not self._stop.wait(wait_s):
                try:
                    work()
                except Exception as e:  # noqa: BLE001 - keep serving; say why in one line.
                    absl_logging.error("%s failed: %s: %s", name, type(e).__name__,
                                       first_line(str(e))[:500])

        threading.Thread(target=loop, name=name, daemon=True).start()

    def watch(self, poll_wait_s: float) -> None:
        """Polls the models' base paths every poll_wait_s seconds (TF Serving's
        --file_system_poll_wait_seconds)."""
        self._every(poll_wait_s, "version-poller", self.poll)

    def watch_config(self, path: str, poll_wait_s: float) -> None:
        """Reads the config file every poll_wait_s seconds and applies it when it has
        changed (TF Serving's --model_config_file_poll_wait_seconds)."""
        def reload() -> None:
            try:
                config = model_config.read_model_server_config(path)
            except ConfigError as e:
                absl_logging.error("Failed to read ModelServerConfig file: %s", e)
                return
            if config == self._config:
                return
            try:
                failures = self.apply_config(config)
            except ConfigError as e:
                absl_logging.error("PollFilesystemAndReloadConfig failed to ReloadConfig: "
                                   "%s", e)
                return
            if failures:
                absl_logging.error("PollFilesystemAndReloadConfig failed to ReloadConfig: "
                                   "%s", not_available_message(failures))

        self._every(poll_wait_s, "config-poller", reload)

    def stop(self) -> None:
        """Stops polling (the versions stay loaded)."""
        self._stop.set()


def not_available_message(failures: dict[str, Exception]) -> str:
    """TF Serving's words for new models that did not become available in a reload."""
    listed = "".join(f"{{name: {name} due to error: {type(error).__name__}: "
                     f"{first_line(str(error))[:300]}}}, "
                     for name, error in sorted(failures.items()))
    return f"{len(failures)} model(s) did not become available: {{{listed}}}"
