"""Tests for the server's model management and runners (tetra_tf.serving.manager,
.model_config, .runners) with stand-in models: version discovery, retried loads, warm-up
before the switch, version policies, labels, config reloads, and which failures of a merged
batch run again."""

import concurrent.futures
import os
import threading
import time

import numpy as np
import pytest

from tetra_tf.serving import admission, batching
from tetra_tf.serving.errors import RequestError
from tetra_tf.serving.manager import ModelManager, Models, VersionLabel, find_latest_version
from tetra_tf.serving.model_config import (ConfigError, check_model_server_config,
                                           parse_model_server_config)
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

    name, version = "toy", 1
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


# ----------------------------------------------------------------------------------------
# Several models from a ModelServerConfig: policies, labels, reloads.


def _config(tmp_path, text):
    return parse_model_server_config(text.replace("BASE", str(tmp_path)))


def _models(tmp_path, loads=None, **options):
    """Models whose load makes a stand-in `_Model` (named) and records (name, version)."""
    loads = [] if loads is None else loads

    def load(name, version, export_dir):
        loads.append((name, version))
        model = _Model(version, [])
        model.name = name
        return model

    return Models(load, **options), loads


def _states(models, name):
    return [(int(entry["version"]), entry["state"])
            for entry in models.status_json(name)["model_version_status"]]


def _wait_for(condition):
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


TWO_MODELS = """
model_config_list {
  config { name: "a" base_path: "BASE/a" model_platform: "tensorflow"
           model_version_policy { specific { versions: 1 versions: 2 } } }
  config { name: "b" base_path: "BASE/b" model_platform: "tensorflow" }
}
"""


def test_version_policies_choose_among_the_versions_on_disk(tmp_path):
    for version in ("1", "2", "3"):
        (tmp_path / "a").mkdir(exist_ok=True)
        _version_dir(tmp_path / "a", version)
    for policy, served in [("", [3]), ("model_version_policy { latest { num_versions: 2 } }",
                                       [2, 3]),
                           ("model_version_policy { all {} }", [1, 2, 3]),
                           ("model_version_policy { specific { versions: 1 versions: 9 } }",
                            [1])]:
        models, _ = _models(tmp_path)
        assert models.apply_config(_config(tmp_path, f"""model_config_list {{ config {{
            name: "a" base_path: "BASE/a" model_platform: "tensorflow" {policy} }} }}""")) == {}
        assert models.served() == {"a": served}, policy


def test_two_models_by_version_and_label(tmp_path):
    for name, versions in (("a", "12"), ("b", "7")):
        (tmp_path / name).mkdir()
        for version in versions:
            _version_dir(tmp_path / name, version)
    models, loads = _models(tmp_path, allow_version_labels_for_unavailable_models=True)
    config = _config(tmp_path, TWO_MODELS.replace(
        "versions: 2 } } }", "versions: 2 } }\n version_labels { key: 'stable' value: 1 } }"))
    assert models.apply_config(config) == {}
    assert sorted(loads) == [("a", 1), ("a", 2), ("b", 7)]
    with models.acquire("a", None) as model:
        assert (model.name, model.version) == ("a", 2)  # the latest of those served
    with models.acquire("a", VersionLabel("stable")) as model:
        assert model.version == 1
    with models.acquire("b", 7) as model:
        assert model.name == "b"
    for name, version, status, text in [
            ("a", VersionLabel("canary"), 400, "Unrecognized servable version label: canary"),
            ("b", VersionLabel("stable"), 400, "Unrecognized servable version label: stable"),
            ("a", 7, 404, "Servable not found for request: Specific(a, 7)"),
            ("c", None, 404, "Servable not found for request: Latest(c)")]:
        with pytest.raises(RequestError) as error:
            with models.acquire(name, version):
                pass
        assert (error.value.status, str(error.value)) == (status, text)
    assert models.status_json("a", VersionLabel("stable"))["model_version_status"][0][
        "version"] == "1"


def test_labels_must_name_available_versions_unless_allowed(tmp_path):
    """TF Serving's rule: a label names an AVAILABLE version; with
    allow_version_labels_for_unavailable_models, a new label may name any version, but a
    label in use only moves to an available one. A refused config changes nothing."""
    (tmp_path / "a").mkdir()
    for version in ("1", "2"):
        _version_dir(tmp_path / "a", version)
    labelled = TWO_MODELS.replace("versions: 2 } } }",
                                  "versions: 2 } }\n version_labels { key: 'x' value: V } }")
    (tmp_path / "b").mkdir()
    _version_dir(tmp_path / "b", "1")
    models, loads = _models(tmp_path)
    with pytest.raises(ConfigError) as error:
        models.apply_config(_config(tmp_path, labelled.replace("V", "1")))
    assert error.value.code == "FAILED_PRECONDITION"
    assert str(error.value) == ("Request to assign label to version 1 of model a, which is "
                                "not currently available for inference")
    assert loads == [] and models.served() == {}
    assert models.apply_config(_config(tmp_path, TWO_MODELS)) == {}  # 1 and 2 now loaded
    assert models.apply_config(_config(tmp_path, labelled.replace("V", "1"))) == {}
    with pytest.raises(ConfigError):
        models.apply_config(_config(tmp_path, labelled.replace("V", "3")))
    with models.acquire("a", VersionLabel("x")) as model:
        assert model.version == 1  # unchanged by the refused config
    allowing, _ = _models(tmp_path, allow_version_labels_for_unavailable_models=True)
    assert allowing.apply_config(_config(tmp_path, labelled.replace("V", "1"))) == {}
    with pytest.raises(ConfigError):  # "x" is in use: it may not move to version 3
        allowing.apply_config(_config(tmp_path, labelled.replace("V", "3")))


@pytest.mark.parametrize("text, message", [
    ('config { name: "a" base_path: "BASE/a" model_platform: "tensorflow" } '
     'config { name: "a" base_path: "BASE/b" model_platform: "tensorflow" }',
     "Illegal to list model a multiple times in config list"),
    ('config { name: "a" base_path: "a" model_platform: "tensorflow" }',
     "Expected model a to have an absolute path or URI; got base_path()=a"),
    ('config { name: "a" base_path: "BASE/a" }',
     "Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
     "ModelServerConfig::model_platform, model name is a"),
    ('config { name: "a" base_path: "BASE/a" model_platform: "pytorch" }',
     "Model a requests unsupported platform pytorch"),
])
def test_bad_configs_are_refused_in_tf_servings_words(tmp_path, text, message):
    with pytest.raises(ConfigError) as error:
        check_model_server_config(_config(tmp_path, f"model_config_list {{ {text} }}"))
    assert (str(error.value), error.value.code) == (message, "INVALID_ARGUMENT")


def test_reload_adds_and_removes_models_and_removed_ones_finish_their_requests(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        _version_dir(tmp_path / name, "1")
    unloaded = []
    models, loads = _models(tmp_path, on_unload=lambda m: unloaded.append(m.name))
    lines = TWO_MODELS.strip().splitlines()  # the list, a's two lines, b's line, its end
    only_a = _config(tmp_path, "\n".join(lines[:3] + lines[4:]))
    assert models.apply_config(only_a) == {} and models.served() == {"a": [1]}
    assert models.apply_config(_config(tmp_path, TWO_MODELS)) == {}
    assert models.served() == {"a": [1], "b": [1]} and loads == [("a", 1), ("b", 1)]
    only_b = _config(tmp_path, "\n".join(lines[:1] + lines[3:]))
    with models.acquire("a", None):  # a request in progress on model a
        assert models.apply_config(only_b) == {}
        assert models.served() == {"b": [1]}
        with pytest.raises(RequestError):
            with models.acquire("a", None):
                pass
        assert _states(models, "a") == [(1, "UNLOADING")] and unloaded == []
    _wait_for(lambda: unloaded == ["a"])
    assert _states(models, "a") == [(1, "END")]  # as TF Serving, the removed model's history
    # A new model whose version fails to load: named in the answer, the rest applied.
    (tmp_path / "c").mkdir()
    _version_dir(tmp_path / "c", "1")
    failing = Models(lambda name, version, path: (_ for _ in ()).throw(OSError("bad")))
    failures = failing.apply_config(_config(tmp_path, TWO_MODELS.replace('"b"', '"c"')))
    assert sorted(failures) == ["a", "c"] and isinstance(failures["c"], OSError)
    assert [entry["status"]["error_code"] for entry in
            failing.status_json("c")["model_version_status"]] == ["UNKNOWN"]
