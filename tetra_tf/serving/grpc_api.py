"""The gRPC front end: TF Serving's PredictionService and ModelService (tensorflow-serving-api).

A servicer class per service (`PredictionServicer`, `ModelServicer`), a method per RPC.
Each method receives its message as bytes and decodes it itself, so that every call, an
oversized or undecodable message included, is answered with TF Serving's status code,
counted in the metrics (TF Serving's, labelled with the method's name: Predict, Classify,
GetModelMetadata, ...) and logged in one line. Predict fills a `PredictRequest` for the one
predict path (predictor.py); a TensorProto's declared shape is checked before any array is
built. Classify, Regress and MultiInference answer as TF Serving does for a model without
such signatures (INVALID_ARGUMENT).
"""

from __future__ import annotations

import functools
import time
import traceback
from concurrent import futures
from typing import Any, Callable

from absl import logging as absl_logging

from tetra_tf.serving import codecs
from tetra_tf.serving.errors import (INFERENCE_METHOD_NAMES, STATUS_CODES, RequestError, first_line,
                                     inference_refusal, log_safe)
from tetra_tf.serving.manager import VersionChoice, VersionLabel, not_available_message
from tetra_tf.serving.metrics import Metrics
from tetra_tf.serving.model_config import ConfigError
from tetra_tf.serving.predictor import PredictRequest, Predictor

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"
# gRPC itself refuses messages over this many times --max_request_bytes (uncounted, as it
# never hands them over); between the two, this server answers RESOURCE_EXHAUSTED itself.
GRPC_MESSAGE_SLACK = 4
MAX_ERROR_CHARS = 1024  # TF Serving's kErrorMessageLimit (model_servers/grpc_status_util.cc)
# The method ("classify", "regress") of a SignatureDef method_name, e.g. a MultiInference
# task's.
INFERENCE_METHODS = {name: method for method, name in INFERENCE_METHOD_NAMES.items()}


def _version_of(model_spec: Any) -> VersionChoice:
    """A ModelSpec's version choice: its version, its version_label, or None (latest)."""
    choice = model_spec.WhichOneof("version_choice")
    if choice == "version_label":
        return VersionLabel(model_spec.version_label)
    return model_spec.version.value if choice == "version" else None


class _CodedError(RequestError):
    """A refusal with a status code of its own (FAILED_PRECONDITION, UNKNOWN), which no
    HTTP status stands for."""

    def __init__(self, message: str, grpc_code: str) -> None:
        super().__init__(message, 400)
        self.grpc_code = grpc_code


def _truncated(message: str) -> str:
    """An error message as TF Serving's ToGRPCStatus sends it: cut after 1024 characters."""
    return message if len(message) <= MAX_ERROR_CHARS else (
        message[:MAX_ERROR_CHARS] + "...TRUNCATED")


def _model_name(request: Any) -> str:
    """The model a request names (a MultiInference its first task's), "" if none."""
    if hasattr(request, "tasks"):
        return request.tasks[0].model_spec.name if request.tasks else ""
    return request.model_spec.name if hasattr(request, "model_spec") else ""


class _Service:
    """One service of TF Serving's gRPC API. Each of its unary methods takes its message as
    raw bytes (`_call`), so that the size check, decoding, status code, metrics and log line
    are the same for every method; a subclass names its methods (`_methods`) and answers
    each decoded request.

    Args:
      predictor: the one predict path, and its `manager` of the served versions.
      metrics: where each call is counted (None: nowhere).
      max_request_bytes: larger messages are refused with RESOURCE_EXHAUSTED.
      log_request: logs each call's line, as in `rest.RestApp`.
    """

    NAME = ""  # the service's full name, e.g. PREDICTION_SERVICE

    def __init__(self, predictor: Predictor, metrics: Metrics | None, max_request_bytes: int,
                 log_request: Callable[..., None]) -> None:
        self._predictor = predictor
        self._manager = predictor.manager
        self._metrics = metrics
        self._max_request_bytes = max_request_bytes
        self._log_request = log_request

    def _methods(self) -> dict[str, tuple[str, Any, Callable[[Any], Any]]]:
        """Each method's RPC name (TF Serving's API label) → its label in this server's
        metrics and log, its request message class, and what answers a decoded request."""
        raise NotImplementedError

    def generic_handler(self) -> Any:
        """The service's grpc handler: each of `_methods` as a unary method on raw bytes."""
        import grpc

        return grpc.method_handlers_generic_handler(self.NAME, {
            rpc: grpc.unary_unary_rpc_method_handler(
                functools.partial(self._call, method, rpc, request_class, answer),
                response_serializer=lambda response: response.SerializeToString())
            for rpc, (method, request_class, answer) in self._methods().items()})

    def _call(self, method: str, rpc: str, request_class: Any, answer: Callable[[Any], Any],
              data: bytes, context: Any) -> Any:
        """One call: size check, decoding, `answer`, then the status, metrics and log."""
        import grpc
        from google.protobuf import message as protobuf_message

        started = time.perf_counter()
        status, message, model_name, grpc_code = 200, "", "", None
        try:
            if len(data) > self._max_request_bytes:
                raise RequestError(f"Received message of {len(data)} bytes, larger than "
                                   f"--max_request_bytes={self._max_request_bytes}", 413)
            try:
                request = request_class.FromString(data)
            except protobuf_message.DecodeError as e:
                raise RequestError(f"Internal: cannot decode the request message as "
                                   f"{request_class.DESCRIPTOR.name}: {e}", 500) from None
            model_name = _model_name(request)
            return answer(request)
        except RequestError as e:
            status, message = e.status, str(e)
            grpc_code = getattr(e, "grpc_code", None)
        except Exception as e:  # noqa: BLE001 - any failure is INTERNAL, not a crash.
            absl_logging.error("internal error:\n%s", traceback.format_exc())
            status, message = 500, f"Internal: {type(e).__name__}: {first_line(str(e))}"
        finally:
            elapsed = time.perf_counter() - started
            code = grpc_code or STATUS_CODES.get(status, "INTERNAL")
            self._log_request("%s grpc %s %s %.1fms", log_safe(context.peer(), 60), method,
                              code, elapsed * 1e3)
            if self._metrics is not None:
                self._metrics.observe("grpc", method, code, elapsed, model_name, rpc)
        context.abort(getattr(grpc.StatusCode, code), _truncated(message))


class PredictionServicer(_Service):
    """TF Serving's PredictionService: Predict and GetModelMetadata; Classify, Regress and
    MultiInference refused as TF Serving refuses them for predict signatures."""

    NAME = PREDICTION_SERVICE

    def _methods(self) -> dict[str, tuple[str, Any, Callable[[Any], Any]]]:
        from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2,
                                             inference_pb2, predict_pb2, regression_pb2)

        return {
            "Predict": ("predict", predict_pb2.PredictRequest, self.predict),
            "GetModelMetadata": ("metadata", get_model_metadata_pb2.GetModelMetadataRequest,
                                 self.get_model_metadata),
            "Classify": ("classify", classification_pb2.ClassificationRequest, self.classify),
            "Regress": ("regress", regression_pb2.RegressionRequest, self.regress),
            "MultiInference": ("multi_inference", inference_pb2.MultiInferenceRequest,
                               self.multi_inference),
        }

    def predict(self, request: Any) -> Any:
        """Predict: the request's inputs through the predict path; its output_filter's
        outputs (all by default)."""
        from tensorflow_serving.apis import predict_pb2

        def decode(specs: dict[str, Any], limits: Any) -> dict[str, Any]:
            codecs.check_input_names(dict(request.inputs), sorted(specs), "inputs")
            return {name: codecs.tensor_proto_to_array(name, tensor, specs[name], limits)
                    for name, tensor in request.inputs.items()}

        result = self._predictor.predict(PredictRequest(
            request.model_spec.name, _version_of(request.model_spec),
            request.model_spec.signature_name, decode))
        outputs = result.outputs
        wanted = list(request.output_filter) or list(outputs)
        unknown = [name for name in wanted if name not in outputs]
        if unknown:
            raise RequestError(f"output_filter names unknown outputs {unknown}")
        response = predict_pb2.PredictResponse()
        response.model_spec.name = result.model_name
        response.model_spec.version.value = result.version
        response.model_spec.signature_name = result.signature_name
        for name in wanted:
            response.outputs[name].CopyFrom(codecs.tensor_proto(outputs[name]))
        return response

    def get_model_metadata(self, request: Any) -> Any:
        """GetModelMetadata: the version's signature_def map (the one field TF Serving
        answers)."""
        from tensorflow_serving.apis import get_model_metadata_pb2

        fields = list(request.metadata_field)
        if fields != ["signature_def"]:
            raise RequestError(f"Metadata field(s) {fields} not supported: request "
                               "['signature_def']")
        with self._manager.acquire(request.model_spec.name,
                                   _version_of(request.model_spec)) as model:
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = model.name
            response.model_spec.version.value = model.version
            signature_defs = get_model_metadata_pb2.SignatureDefMap()
            for name, signature_def in model.signature_defs.items():
                signature_defs.signature_def[name].CopyFrom(signature_def)
            response.metadata["signature_def"].Pack(signature_defs)
            return response

    def classify(self, request: Any) -> Any:
        """Classify: refused (`_refuse_inference`)."""
        return self._refuse_inference("classify", request)

    def regress(self, request: Any) -> Any:
        """Regress: refused (`_refuse_inference`)."""
        return self._refuse_inference("regress", request)

    def _refuse_inference(self, method: str, request: Any) -> Any:
        """Classify or Regress (method "classify" or "regress"): TF Serving's checks, in
        its order, up to the signature this server cannot run that way."""
        if not request.HasField("model_spec"):
            raise RequestError("Missing ModelSpec")
        spec = request.model_spec
        with self._manager.acquire(spec.name, _version_of(spec)) as model:
            raise inference_refusal(method, spec.signature_name, model.signature_defs)

    def multi_inference(self, request: Any) -> Any:
        """MultiInference: TF Serving checks its tasks in order and refuses the first one as
        Classify or Regress would (UNIMPLEMENTED for another method_name); this server runs
        no classification or regression signature, so no task passes."""
        from tensorflow_serving.apis import inference_pb2

        task = request.tasks[0] if request.tasks else inference_pb2.InferenceTask()
        with self._manager.acquire(task.model_spec.name,
                                   _version_of(task.model_spec)) as model:
            method = INFERENCE_METHODS.get(task.method_name)
            if method is None:
                raise RequestError("Unimplemented: Unsupported signature method_name: "
                                   f"{log_safe(task.method_name, 100)}", 501)
            raise inference_refusal(method, task.model_spec.signature_name,
                                    model.signature_defs)


class ModelServicer(_Service):
    """TF Serving's ModelService: GetModelStatus and HandleReloadConfigRequest."""

    NAME = MODEL_SERVICE

    def _methods(self) -> dict[str, tuple[str, Any, Callable[[Any], Any]]]:
        from tensorflow_serving.apis import get_model_status_pb2, model_management_pb2

        return {
            "GetModelStatus": ("status", get_model_status_pb2.GetModelStatusRequest,
                               self.get_model_status),
            "HandleReloadConfigRequest": ("reload_config",
                                          model_management_pb2.ReloadConfigRequest,
                                          self.handle_reload_config_request),
        }

    def get_model_status(self, request: Any) -> Any:
        """GetModelStatus: the model's versions and their states (`Models.status_json`)."""
        from tensorflow_serving.apis import get_model_status_pb2

        spec = request.model_spec
        answer = self._manager.status_json(spec.name, _version_of(spec))
        response = get_model_status_pb2.GetModelStatusResponse()
        for entry in answer["model_version_status"]:
            version = response.model_version_status.add()
            version.version = int(entry["version"])
            version.state = get_model_status_pb2.ModelVersionStatus.State.Value(
                entry["state"])
            version.status.error_code = version.status.DESCRIPTOR.fields_by_name[
                "error_code"].enum_type.values_by_name[entry["status"]["error_code"]].number
            version.status.error_message = entry["status"]["error_message"]
        return response

    def handle_reload_config_request(self, request: Any) -> Any:
        """HandleReloadConfigRequest: serves exactly the request's model config list
        (`Models.apply_config`), with TF Serving's status codes: INVALID_ARGUMENT for a
        bad config, FAILED_PRECONDITION for a label on a version that is not available,
        UNKNOWN for new models that did not become available (the config stays in
        force). Each metric name asked for is answered with an increase of 0, as TF
        Serving answers for names it does not have."""
        from tensorflow_serving.apis import model_management_pb2

        if request.config.WhichOneof("config") != "model_config_list":
            raise RequestError("ServerModelConfig type not supported by "
                               "HandleReloadConfigRequest. Only ModelConfigList is currently "
                               "supported")
        try:
            failures = self._manager.apply_config(request.config)
        except ConfigError as e:
            raise _CodedError(str(e), e.code) from None
        if failures:
            raise _CodedError(not_available_message(failures), "UNKNOWN")
        response = model_management_pb2.ReloadConfigResponse()
        for name in request.metric_names:
            response.metric.add(name=name)
        return response


def create_grpc_server(predictor: Predictor, metrics: Metrics | None, host: str, port: int,
                       executor: futures.Executor, max_request_bytes: int,
                       log_request: Callable[..., None] = absl_logging.info
                       ) -> tuple[Any, int]:
    """TF Serving's PredictionService (`PredictionServicer`) and ModelService
    (`ModelServicer`) on host:port; returns (grpc server, bound port), not yet started
    (main.py starts and stops it, and owns the `executor` whose threads answer the calls).
    `log_request` logs each call's line, as in `rest.RestApp`.

    A model_spec picks a version by number, by label, or neither (the latest). Errors carry
    TF Serving's status codes: INVALID_ARGUMENT for bad requests (an unknown version label
    included), NOT_FOUND for an unknown model or version, UNAVAILABLE for a full batch queue,
    UNIMPLEMENTED for a real classification or regression signature,
    RESOURCE_EXHAUSTED for a message over max_request_bytes, INTERNAL for a model failure
    or an undecodable message.
    """
    import grpc

    services = [service(predictor, metrics, max_request_bytes, log_request)
                for service in (PredictionServicer, ModelServicer)]
    server = grpc.server(
        executor, handlers=[service.generic_handler() for service in services],
        options=[("grpc.max_receive_message_length", GRPC_MESSAGE_SLACK * max_request_bytes),
                 ("grpc.so_reuseport", 0)])
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    bound_port = server.add_insecure_port(address)
    if not bound_port:
        raise OSError(f"cannot bind gRPC port {address}")
    return server, bound_port
