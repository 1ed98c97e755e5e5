"""The gRPC front end: TF Serving's PredictionService and ModelService (tensorflow-serving-api).

Each method receives its message as bytes and decodes it itself, so that every call, an
oversized or undecodable message included, is answered with TF Serving's status code,
counted in the metrics and logged in one line. Predict fills a `PredictRequest` for the
one predict path (predictor.py); a TensorProto's declared shape is checked before any
array is built.
"""

from __future__ import annotations

import time
import traceback
from concurrent import futures
from typing import Any, Callable

from absl import logging as absl_logging

from tetra_tf.serving import codecs
from tetra_tf.serving.errors import STATUS_CODES, RequestError, first_line, log_safe
from tetra_tf.serving.metrics import Metrics
from tetra_tf.serving.predictor import PredictRequest, Predictor

PREDICTION_SERVICE = "tensorflow.serving.PredictionService"
MODEL_SERVICE = "tensorflow.serving.ModelService"
# gRPC itself refuses messages over this many times --max_request_bytes (uncounted, as it
# never hands them over); between the two, this server answers RESOURCE_EXHAUSTED itself.
GRPC_MESSAGE_SLACK = 4


def _version_of(model_spec: Any) -> int | None:
    if model_spec.version_label:
        raise RequestError("version labels are not supported by this server; use "
                           "model_spec.version")
    return model_spec.version.value if model_spec.HasField("version") else None


def create_grpc_server(predictor: Predictor, metrics: Metrics | None, host: str, port: int,
                       executor: futures.Executor, max_request_bytes: int,
                       log_request: Callable[..., None] = absl_logging.info
                       ) -> tuple[Any, int]:
    """TF Serving's PredictionService (Predict, GetModelMetadata; Classify, Regress and
    MultiInference answer UNIMPLEMENTED) and ModelService (GetModelStatus) on host:port;
    returns (grpc server, bound port), not yet started (main.py starts and stops it, and
    owns the `executor` whose threads answer the calls). `log_request` logs each call's
    line, as in `rest.RestApp`.

    Errors carry TF Serving's status codes: INVALID_ARGUMENT for bad requests, NOT_FOUND
    for an unknown model or version, UNAVAILABLE for a full batch queue,
    RESOURCE_EXHAUSTED for a message over max_request_bytes, INTERNAL for a model failure
    or an undecodable message.
    """
    import grpc
    from google.protobuf import message as protobuf_message
    from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2,
                                         get_model_status_pb2, inference_pb2,
                                         model_management_pb2, predict_pb2, regression_pb2)

    manager = predictor.manager

    def handler(method: str, request_class: Any, answer: Callable[[Any], Any]) -> Any:
        """A unary method taking raw bytes: size check, decoding, status, metrics, log."""

        def behaviour(data: bytes, context: Any) -> Any:
            started = time.perf_counter()
            status, message = 200, ""
            try:
                if len(data) > max_request_bytes:
                    raise RequestError(f"Received message of {len(data)} bytes, larger than "
                                       f"--max_request_bytes={max_request_bytes}", 413)
                try:
                    request = request_class.FromString(data)
                except protobuf_message.DecodeError as e:
                    raise RequestError(f"Internal: cannot decode the request message as "
                                       f"{request_class.DESCRIPTOR.name}: {e}", 500) from None
                return answer(request)
            except RequestError as e:
                status, message = e.status, str(e)
            except Exception as e:  # noqa: BLE001 - any failure is INTERNAL, not a crash.
                absl_logging.error("internal error:\n%s", traceback.format_exc())
                status, message = 500, f"Internal: {type(e).__name__}: {first_line(str(e))}"
            finally:
                elapsed = time.perf_counter() - started
                code = STATUS_CODES.get(status, "INTERNAL")
                log_request("%s grpc %s %s %.1fms", log_safe(context.peer(), 60), method,
                            code, elapsed * 1e3)
                if metrics is not None:
                    metrics.observe("grpc", method, code, elapsed)
            context.abort(getattr(grpc.StatusCode, STATUS_CODES.get(status, "INTERNAL")),
                          message)

        return grpc.unary_unary_rpc_method_handler(
            behaviour, response_serializer=lambda response: response.SerializeToString())

    def predict(request: Any) -> Any:
        def decode(specs: dict[str, Any], limits: Any) -> dict[str, Any]:
            codecs.check_input_names(dict(request.inputs), sorted(specs), "inputs")
            return {name: codecs.tensor_proto_to_array(name, tensor, specs[name], limits)
                    for name, tensor in request.inputs.items()}

        result = predictor.predict(PredictRequest(
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

    def metadata(request: Any) -> Any:
        fields = list(request.metadata_field)
        if fields != ["signature_def"]:
            raise RequestError(f"Metadata field(s) {fields} not supported: request "
                               "['signature_def']")
        with manager.acquire(request.model_spec.name,
                             _version_of(request.model_spec)) as model:
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            response.model_spec.name = model.name
            response.model_spec.version.value = model.version
            signature_defs = get_model_metadata_pb2.SignatureDefMap()
            for name, signature_def in model.signature_defs.items():
                signature_defs.signature_def[name].CopyFrom(signature_def)
            response.metadata["signature_def"].Pack(signature_defs)
            return response

    def status(request: Any) -> Any:
        spec = request.model_spec
        answer = manager.status_json(spec.name, _version_of(spec))
        response = get_model_status_pb2.GetModelStatusResponse()
        for entry in answer["model_version_status"]:
            version = response.model_version_status.add()
            version.version = int(entry["version"])
            version.state = get_model_status_pb2.ModelVersionStatus.State.Value(
                entry["state"])
        return response

    def unimplemented(method: str) -> Callable[[Any], Any]:
        def refuse(request: Any) -> Any:
            raise RequestError(f"Unimplemented: this server implements Predict, not {method}",
                               501)
        return refuse

    prediction_methods = {
        "Predict": handler("predict", predict_pb2.PredictRequest, predict),
        "GetModelMetadata": handler("metadata", get_model_metadata_pb2.GetModelMetadataRequest,
                                    metadata),
        "Classify": handler("classify", classification_pb2.ClassificationRequest,
                            unimplemented("Classify")),
        "Regress": handler("regress", regression_pb2.RegressionRequest,
                           unimplemented("Regress")),
        "MultiInference": handler("multi_inference", inference_pb2.MultiInferenceRequest,
                                  unimplemented("MultiInference")),
    }
    model_methods = {
        "GetModelStatus": handler("status", get_model_status_pb2.GetModelStatusRequest, status),
        "HandleReloadConfigRequest": handler(
            "reload_config", model_management_pb2.ReloadConfigRequest,
            unimplemented("HandleReloadConfigRequest")),
    }
    server = grpc.server(
        executor,
        handlers=[grpc.method_handlers_generic_handler(PREDICTION_SERVICE, prediction_methods),
                  grpc.method_handlers_generic_handler(MODEL_SERVICE, model_methods)],
        options=[("grpc.max_receive_message_length", GRPC_MESSAGE_SLACK * max_request_bytes),
                 ("grpc.so_reuseport", 0)])
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    bound_port = server.add_insecure_port(address)
    if not bound_port:
        raise OSError(f"cannot bind gRPC port {address}")
    return server, bound_port
