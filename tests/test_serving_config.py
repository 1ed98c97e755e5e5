"""Tests for the server's model config (--model_config_file, TF Serving's ModelServerConfig):
several models, version policies and labels over REST and gRPC, and reloads (by
ModelService.HandleReloadConfigRequest and by polling the file) that add a model while
clients keep sending requests, every one answered.

The server runs as tests/test_serving.py runs it, serving toy SavedModels with the export's
interface and, as the model a reload adds, a symbolic link to the tiny export (conftest.py's
tiny_export_dir).
"""

import os
import subprocess
import sys
import threading

import pytest

for _module in ("waitress", "grpc", "tensorflow_serving"):
    pytest.importorskip(_module, reason="needs the 'serving' extra")

import grpc  # noqa: E402
import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from tensorflow_serving.apis import (get_model_status_pb2, model_management_pb2,  # noqa: E402
                                     model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)

from conftest import free_port, subprocess_env  # noqa: E402
from test_serving import (HTTP_TIMEOUT_S, REPO_ROOT, SERVER_SCRIPT, _http,  # noqa: E402
                          _running_server, _save_toy_version)
from tetra_tf.serving.model_config import (check_model_server_config,  # noqa: E402
                                           read_model_server_config)

MODELS_CONFIG = os.path.join(REPO_ROOT, "serving", "models.config")
SENTENCE = "The cat sat on the mat ."
AVAILABLE = get_model_status_pb2.ModelVersionStatus.AVAILABLE


@pytest.fixture(scope="module")
def model_root(tiny_export_dir, tmp_path_factory):
    """tetra/1 and tetra/2, toy SavedModels with the export's interface (test_serving.ToyParser,
    trees rooted in TOP: quick to load), and other/1, the tiny export: the model a reload
    adds is a real one, whose load and warm-up take seconds while "tetra" keeps serving."""
    root = tmp_path_factory.mktemp("models")
    (root / "tetra").mkdir()
    for version in (1, 2):
        _save_toy_version(root / "tetra", version, "TOP")
    (root / "other").mkdir()
    os.symlink(tiny_export_dir, root / "other" / "1")
    return root


@pytest.fixture(scope="module")
def toy_model_root(tmp_path_factory):
    """tetra/1, tetra/2 and other/1 as toy SavedModels with the export's interface
    (test_serving.ToyParser, trees rooted in TOP): quick to load, for what the config does."""
    root = tmp_path_factory.mktemp("toy_models")
    for name, version in (("tetra", 1), ("tetra", 2), ("other", 1)):
        (root / name).mkdir(exist_ok=True)
        _save_toy_version(root / name, version, "TOP")
    return root


def _repo_config(model_root, *, with_other=False, labels=False):
    """serving/models.config with its base path filled in (as a deployment fills it),
    plus, if asked, tetra's versions 1 and 2 labelled stable and canary, and the model
    "other"."""
    config = read_model_server_config(MODELS_CONFIG)
    (tetra,) = config.model_config_list.config
    assert (tetra.name, tetra.base_path) == ("tetra", "/models/tetra")
    tetra.base_path = str(model_root / "tetra")
    if labels:
        tetra.model_version_policy.specific.versions[:] = [1, 2]
        tetra.version_labels["stable"] = 1
        tetra.version_labels["canary"] = 2
    if with_other:
        other = config.model_config_list.config.add()
        other.CopyFrom(tetra)
        other.name, other.base_path = "other", str(model_root / "other")
        other.ClearField("model_version_policy")
        other.ClearField("version_labels")
    return config


def _write(path, config):
    """Writes a config whole (a reader never sees half of it)."""
    staging = path.with_suffix(".staging")
    staging.write_text(text_format.MessageToString(config))
    os.replace(staging, path)


def _predict_rest(port, path):
    status, body = _http(port, "POST", f"/v1/models/{path}:predict", {"instances": [SENTENCE]})
    return status, (body["predictions"][0]["tree"] if status == 200 else body)


def _predict_grpc(stub, name, version=None, label=None):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    if version is not None:
        request.model_spec.version.value = version
    if label is not None:
        request.model_spec.version_label = label
    request.inputs["sentences"].CopyFrom(tf.make_tensor_proto([SENTENCE]))
    return stub.Predict(request, HTTP_TIMEOUT_S)


def test_serving_models_config_is_a_valid_model_server_config():
    """The file the official server reads as it is: one model, checked as TF Serving's
    ServerCore checks a config."""
    config = read_model_server_config(MODELS_CONFIG)
    check_model_server_config(config)
    assert [model.name for model in config.model_config_list.config] == ["tetra"]


@pytest.mark.server
def test_two_models_and_labelled_versions_over_rest_and_grpc(toy_model_root, tmp_path):
    config_path = tmp_path / "models.config"
    _write(config_path, _repo_config(toy_model_root, with_other=True, labels=True))
    grpc_port = free_port()
    with _running_server(None, "tetra", tmp_path / "server.log",
                         f"--model_config_file={config_path}",
                         "--allow_version_labels_for_unavailable_models",
                         grpc_port=grpc_port) as port:
        status, body = _http(port, "GET", "/v1/models/tetra")
        assert status == 200
        assert [(v["version"], v["state"]) for v in body["model_version_status"]] == [
            ("2", "AVAILABLE"), ("1", "AVAILABLE")]
        for path, version in [("tetra", "2"), ("tetra/versions/1", "1"),
                              ("tetra/labels/stable", "1"), ("tetra/labels/canary", "2"),
                              ("other", "1")]:
            status, body = _http(port, "GET", f"/v1/models/{path}/metadata")
            assert (status, body["model_spec"]["version"]) == (200, version), path
            status, tree = _predict_rest(port, path)
            assert status == 200 and tree.startswith("(TOP"), (path, tree)
        assert _http(port, "GET", "/v1/models/tetra/labels/stable")[1] == {
            "model_version_status": [{"version": "1", "state": "AVAILABLE",
                                      "status": {"error_code": "OK", "error_message": ""}}]}
        assert _predict_rest(port, "tetra/labels/beta") == (
            400, {"error": "Unrecognized servable version label: beta"})
        assert _predict_rest(port, "other/labels/stable")[0] == 400  # labels are per model
        assert _predict_rest(port, "other/versions/2")[0] == 404

        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            for name, version, label, served in [("tetra", None, None, 2),
                                                 ("tetra", 1, None, 1),
                                                 ("tetra", None, "stable", 1),
                                                 ("tetra", None, "canary", 2),
                                                 ("other", None, None, 1)]:
                response = _predict_grpc(stub, name, version, label)
                assert (response.model_spec.name, response.model_spec.version.value) == (
                    name, served)
                assert tf.make_ndarray(response.outputs["tree"])[0].startswith(b"(TOP")
            with pytest.raises(grpc.RpcError) as error:
                _predict_grpc(stub, "tetra", label="beta")
            assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error.value.details() == "Unrecognized servable version label: beta"
            models = model_service_pb2_grpc.ModelServiceStub(channel)
            request = get_model_status_pb2.GetModelStatusRequest()
            request.model_spec.name = "tetra"
            assert [(v.version, v.state) for v in models.GetModelStatus(
                request, HTTP_TIMEOUT_S).model_version_status] == [(2, AVAILABLE),
                                                                    (1, AVAILABLE)]


def _states(port, name):
    status, body = _http(port, "GET", f"/v1/models/{name}")
    return [v["state"] for v in body["model_version_status"]] if status == 200 else []


class _Clients:
    """Client threads sending predict requests back to back (two over REST, one over
    gRPC) to the model "tetra", and also to "other" once `add_other` is set; each answer
    is counted, by model and by whether it was 200/OK."""

    def __init__(self, port, grpc_port):
        self.port, self.grpc_port = port, grpc_port
        self.stop, self.add_other = threading.Event(), threading.Event()
        self.lock = threading.Lock()
        self.answered = {"tetra": 0, "other": 0}
        self.failures = []
        self.threads = [threading.Thread(target=self._run, args=(api,))
                        for api in ("rest", "rest", "grpc")]

    def _count(self, model, ok, answer):
        with self.lock:
            if ok:
                self.answered[model] += 1
            else:
                self.failures.append((model, answer))

    def _run(self, api):
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}") as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            while not self.stop.is_set():
                for model in ("tetra", "other") if self.add_other.is_set() else ("tetra",):
                    if api == "rest":
                        status, tree = _predict_rest(self.port, model)
                        self._count(model, status == 200 and tree.startswith("(TOP"),
                                    (status, tree))
                        continue
                    try:
                        response = _predict_grpc(stub, model)
                        self._count(model, response.model_spec.name == model, response)
                    except grpc.RpcError as e:
                        self._count(model, False, (e.code(), e.details()))
                self.stop.wait(0.01)  # back to back, but leaving the server a share of the CPU

    def total(self):
        with self.lock:
            return sum(self.answered.values())

    def wait_for(self, condition):
        """Waits (by answers counted, up to a generous bound) for condition()."""
        for _ in range(60_000):
            if condition():
                return
            with self.lock:
                assert not self.failures, self.failures[:3]
            threading.Event().wait(0.01)
        raise AssertionError(f"not reached: {self.answered}")


@pytest.mark.server
@pytest.mark.parametrize("how", ["HandleReloadConfigRequest", "file poll"])
def test_reload_adds_a_model_while_every_request_is_answered(model_root, tmp_path, how):
    config_path = tmp_path / "models.config"
    _write(config_path, _repo_config(model_root))
    grpc_port = free_port()
    poll = ["--model_config_file_poll_wait_seconds=0.2"] if how == "file poll" else []
    with _running_server(None, "tetra", tmp_path / "server.log",
                         f"--model_config_file={config_path}", *poll,
                         grpc_port=grpc_port) as port:
        assert _predict_rest(port, "other")[0] == 404
        clients = _Clients(port, grpc_port)
        for thread in clients.threads:
            thread.start()
        try:
            clients.wait_for(lambda: clients.answered["tetra"] >= 6)
            before = clients.total()
            new_config = _repo_config(model_root, with_other=True)
            if how == "file poll":
                _write(config_path, new_config)
                clients.wait_for(lambda: _states(port, "other") == ["AVAILABLE"])
            else:
                with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                    request = model_management_pb2.ReloadConfigRequest()
                    request.config.CopyFrom(new_config)
                    response = model_service_pb2_grpc.ModelServiceStub(
                        channel).HandleReloadConfigRequest(request, 300)
                assert response.status.error_code == 0
            during = clients.total() - before
            clients.add_other.set()
            clients.wait_for(lambda: clients.answered["other"] >= 6)
        finally:
            clients.stop.set()
            for thread in clients.threads:
                thread.join(timeout=2 * HTTP_TIMEOUT_S)
        assert clients.failures == []
        # Requests were answered while the new model loaded and warmed up, and after.
        assert during > 0 and clients.answered["tetra"] > before
        assert clients.answered["other"] >= 6
        assert _states(port, "other") == ["AVAILABLE"]


@pytest.mark.parametrize("flags, message", [
    (["--model_config_file=CONFIG", "--model_base_path=BASE"],
     "error: --model_config_file lists the models to serve: give it without --model_name and "
     "--model_base_path"),
    (["--model_config_file=CONFIG", "--model_name=x"],
     "error: --model_config_file lists the models to serve: give it without --model_name and "
     "--model_base_path"),
    (["--model_config_file=MISSING"], "error: --model_config_file: cannot read MISSING: "
     "No such file or directory"),
    (["--model_config_file=RELATIVE"], "error: --model_config_file: Expected model tetra to "
     "have an absolute path or URI; got base_path()=models/tetra"),
])
def test_config_flag_errors_are_one_line_and_exit_2(model_root, tmp_path, flags, message):
    config, relative = tmp_path / "models.config", tmp_path / "relative.config"
    _write(config, _repo_config(model_root))
    relative.write_text(config.read_text().replace(str(model_root / "tetra"), "models/tetra"))
    paths = {"CONFIG": str(config), "BASE": str(model_root / "tetra"),
             "MISSING": str(tmp_path / "missing.config"), "RELATIVE": str(relative)}
    for name, path in paths.items():
        flags = [flag.replace(name, path) for flag in flags]
        message = message.replace(name, path)
    result = subprocess.run([sys.executable, SERVER_SCRIPT, *flags,
                             f"--rest_api_port={free_port()}", f"--port={free_port()}"],
                            capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
                            env=subprocess_env())
    assert (result.returncode, result.stderr.strip().splitlines()) == (2, [message])
