"""The one predict path of both front ends: a request → admission → runner → outputs.

REST (rest.py) and gRPC (grpc_api.py) only fill a `PredictRequest`: the model spec, and how
to turn their body into input arrays once the signature's specs and limits are known.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from tetra_tf.serving import admission
from tetra_tf.serving.admission import ModelLimits
from tetra_tf.serving.manager import Models, VersionChoice
from tetra_tf.serving.runners import Runner


@dataclasses.dataclass
class PredictRequest:
    """A predict request as a front end decoded it.

    Attributes:
      version: a version number, a `VersionLabel`, or None for the latest version.
      decode: given the signature's input specs and the version's limits, returns the
        input arrays (checking each one's shape before building it).
    """

    model_name: str
    version: VersionChoice
    signature_name: str
    decode: Callable[[dict[str, Any], ModelLimits], dict[str, np.ndarray]]


@dataclasses.dataclass
class PredictResult:
    model_name: str
    version: int
    signature_name: str
    batch_size: int
    outputs: dict[str, np.ndarray]


class Predictor:
    """Serves predict requests on the served models' versions with a runner (direct or
    batching)."""

    def __init__(self, manager: Models, run: Runner) -> None:
        self.manager = manager
        self.run = run

    def predict(self, request: PredictRequest) -> PredictResult:
        """Raises RequestError: unknown model, version, label or signature, refused input,
        model failure."""
        with self.manager.acquire(request.model_name, request.version) as model:
            signature_name = model.signature(request.signature_name)
            inputs = request.decode(model.input_specs(signature_name), model.limits)
            prepared = admission.prepare(signature_name, inputs, model.limits,
                                         model.piece_counter)
            outputs = self.run(model, prepared)
            return PredictResult(model.name, model.version, signature_name,
                                 prepared.batch_size, outputs)
