"""One loaded SavedModel version: its signatures, metadata, limits, warm-up and model call."""

from __future__ import annotations

import os
import re
import threading
import time
import traceback
from typing import Any, Callable

import numpy as np
from absl import logging as absl_logging

from tetra_tf.contract import export_format
from tetra_tf.serving.admission import Limits, ModelLimits
from tetra_tf.serving.errors import RequestError, first_line, log_safe


class PieceCounter:
    """Counts a request's WordPiece pieces as the export's graph will, before it runs.

    Uses tetra_tf.data.tokenization.SubwordTokenizer on the export's own vocabulary asset. A
    word's pieces past max_pieces_per_word are dropped by the graph, so a word counts
    min(pieces, max_pieces_per_word). Lower-casing and the special tokens are the export's
    (`export_format.lower_case`: its model card, else its vocabulary;
    `export_format.special_tokens`).
    """

    def __init__(self, vocab_path: str, max_pieces_per_word: int, lower_case: bool,
                 special_tokens: export_format.SpecialTokens = export_format.SpecialTokens()
                 ) -> None:
        """Args:
          vocab_path: the export's vocabulary asset.
          max_pieces_per_word: the export's cap on a word's pieces.
          lower_case, special_tokens: the export's tokenizer's.
        """
        import tensorflow as tf

        from tetra_tf.data import tokenization

        self.max_pieces_per_word = max_pieces_per_word
        self._tokenizer = tokenization.SubwordTokenizer(vocab_path, lower_case=lower_case,
                                                        special_tokens=special_tokens)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def count(words: tf.Tensor) -> tf.Tensor:
            pieces = self._tokenizer.tokenize_flat_words(words).row_lengths()
            return tf.minimum(tf.cast(pieces, tf.int32), max_pieces_per_word)

        self._count = count
        self.count([b"warm-up"])  # Traces now, not on the first request.

    def count(self, words: list[bytes]) -> np.ndarray:
        """Pieces per word (each at most max_pieces_per_word), int32 [len(words)]."""
        if not words:
            return np.zeros([0], np.int32)
        return self._count(np.array(words, dtype=object)).numpy()


def read_signature_defs(export_dir: str, tags: str = "serve") -> dict[str, Any]:
    """Returns the SignatureDef protos of the MetaGraph tagged `tags`, by signature name."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    path = export_format.saved_model_file(export_dir)
    if path is None:
        raise FileNotFoundError(f"{export_dir}: no saved_model.pb")
    if path.endswith(".pb"):
        with open(path, "rb") as f:
            saved_model.ParseFromString(f.read())
    else:
        with open(path, encoding="utf-8") as f:
            text_format.Parse(f.read(), saved_model)
    for meta_graph in saved_model.meta_graphs:
        if tags in meta_graph.meta_info_def.tags:
            return dict(meta_graph.signature_def)
    raise ValueError(f"{export_dir}: no MetaGraph tagged {tags!r}")


def _signature_def_json(signature_def: Any) -> dict[str, Any]:
    """A SignatureDef as TF Serving prints it (proto JSON, snake_case, defaults included)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(signature_def, preserving_proto_field_name=True,
                                     always_print_fields_with_no_presence=True)


class ServedModel:
    """One loaded SavedModel version: its signatures, metadata, limits and a guarded call."""

    def __init__(self, name: str, version: int, export_dir: str, limits: Limits = Limits(),
                 max_concurrent_predictions: int = 1,
                 on_call_seconds: Callable[[float], None] | None = None) -> None:
        """Loads export_dir (importing tensorflow_text first, when installed).

        Args:
          name: the model name in request paths.
          version: the version number reported and accepted in paths.
          export_dir: the SavedModel directory.
          limits: the server's own limits; the export's (assets.extra/limits.json) bound
            them from above (`ModelLimits`).
          max_concurrent_predictions: model calls allowed to run at once; others wait.
          on_call_seconds: given each model call's seconds (from when it may run, so not
            its wait for a slot; failed calls too), e.g. a metric's observe.
        """
        import tensorflow as tf

        try:
            import tensorflow_text  # noqa: F401 - registers the TF Text ops the model may use.
        except ImportError:
            pass
        self.name = name
        self.version = version
        self.export_dir = export_dir
        self._tf = tf
        self.signature_defs = read_signature_defs(export_dir)
        export_limits = export_format.read_limits(export_dir)
        self.limits = ModelLimits.of(limits, export_limits)
        self._loaded = tf.saved_model.load(export_dir, tags=["serve"])
        self._functions = dict(self._loaded.signatures)
        self._input_specs = {
            name: dict(function.structured_input_signature[1])
            for name, function in self._functions.items()}
        self._model_calls = threading.BoundedSemaphore(max_concurrent_predictions)
        self._on_call_seconds = on_call_seconds
        vocab_path = export_format.encoder_vocab_path(export_dir)
        lower_case = export_format.lower_case(export_dir)
        self.piece_counter = (
            PieceCounter(vocab_path, self.limits.sentence.max_pieces_per_word, lower_case,
                         export_format.special_tokens(export_dir))
            if os.path.isfile(vocab_path) and lower_case is not None
            and self.limits.sentence.max_pieces_per_word
            else None)

    @property
    def signature_names(self) -> list[str]:
        return sorted(self._functions)

    def status_json(self) -> dict[str, Any]:
        return {"model_version_status": [{
            "version": str(self.version), "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""}}]}

    def metadata_json(self) -> dict[str, Any]:
        signature_defs = {name: _signature_def_json(signature_def)
                          for name, signature_def in sorted(self.signature_defs.items())}
        return {"model_spec": {"name": self.name, "signature_name": "",
                               "version": str(self.version)},
                "metadata": {"signature_def": {"signature_def": signature_defs}}}

    def signature(self, signature_name: str) -> str:
        """The signature's name ("" → serving_default), checked to exist (else 400)."""
        signature_name = signature_name or export_format.SERVING_SIGNATURE
        if signature_name not in self._functions:
            # TF Serving answers an unknown signature with INVALID_ARGUMENT, i.e. HTTP 400.
            raise RequestError(f'Serving signature name: "{log_safe(signature_name, 100)}" '
                               f"not found in signature def (available: "
                               f"{', '.join(self.signature_names)})")
        return signature_name

    def input_specs(self, signature_name: str) -> dict[str, Any]:
        return self._input_specs[signature_name]

    def warm_up(self) -> int:
        """Replays the export's warm-up records (TF Serving's
        assets.extra/tf_serving_warmup_requests, as TF Serving does when it loads a version),
        or, for an export without them, runs every signature once on a one-row input, so
        that the first requests a new version serves do not pay for the first runs.

        Returns:
          The number of model calls made.
        """
        requests = read_warmup_requests(self.export_dir)
        if not requests:
            requests = [(signature_name, {name: _warm_up_array(spec, name) for name, spec
                                          in self._input_specs[signature_name].items()})
                        for signature_name in self.signature_names]
        for signature_name, inputs in requests:
            try:
                self.call(self.signature(signature_name), inputs)
            except RequestError as e:
                absl_logging.warning("warm-up of version %d, signature %s: %s", self.version,
                                     signature_name, first_line(str(e)))
        return len(requests)

    def call(self, signature_name: str, inputs: dict[str, np.ndarray]
             ) -> dict[str, np.ndarray]:
        """Runs the signature on input arrays (through the concurrency semaphore).

        Raises:
          RequestError: the model raised InvalidArgumentError (400) or failed (500).
        """
        tf = self._tf
        specs = self._input_specs[signature_name]
        tensors = {name: tf.constant(value, dtype=specs[name].dtype)
                   for name, value in inputs.items()}
        with self._model_calls:
            started = time.perf_counter()
            try:
                outputs = self._functions[signature_name](**tensors)
                outputs = {name: value.numpy() for name, value in
                           (outputs if isinstance(outputs, dict)
                            else {"output_0": outputs}).items()}
            except tf.errors.InvalidArgumentError as e:
                raise RequestError(f"Invalid argument: {_tf_error_summary(e.message)}",
                                   400) from e
            except Exception as e:  # noqa: BLE001 - any model failure is a 500, not a crash.
                absl_logging.error("model call failed:\n%s", traceback.format_exc())
                raise RequestError(f"Internal: {type(e).__name__}: {first_line(str(e))}",
                                   500) from e
            finally:
                if self._on_call_seconds is not None:
                    self._on_call_seconds(time.perf_counter() - started)
        return outputs


def read_warmup_requests(export_dir: str) -> list[tuple[str, dict[str, np.ndarray]]]:
    """The predict requests among an export's warm-up records, in file order, as
    (signature name, input arrays); [] if it has no warm-up file.

    Raises:
      RequestError: for a file that is not TFRecords of PredictionLog protos (500).
    """
    path = os.path.join(export_dir, export_format.WARMUP_FILE)
    if not os.path.isfile(path):
        return []
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    requests = []
    try:
        for record in tf.data.TFRecordDataset(path):
            log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            if log.WhichOneof("log_type") != "predict_log":
                absl_logging.warning("%s: skipping a %s warm-up record (only predict is "
                                     "served)", path, log.WhichOneof("log_type"))
                continue
            request = log.predict_log.request
            requests.append((request.model_spec.signature_name,
                             {name: tf.make_ndarray(tensor)
                              for name, tensor in request.inputs.items()}))
    except Exception as e:  # noqa: BLE001 - a damaged file: the version does not load
        raise RequestError(f"{path}: not TF Serving warm-up records ({type(e).__name__}: "
                           f"{first_line(str(e))})", 500) from e
    return requests


def _warm_up_array(spec: Any, name: str = "") -> np.ndarray:
    """A one-row input for a TensorSpec: "warm-up" for strings, 1 for numbers (each unknown
    dimension 1); parse_constrained's constraint inputs hold their padding (none)."""
    shape = [1 if size is None else size for size in spec.shape.as_list()] \
        if spec.shape.rank is not None else [1]
    if name in export_format.CONSTRAINT_INPUTS:
        return np.full(shape, b"" if spec.dtype.name == "string" else -1,
                       dtype=object if spec.dtype.name == "string"
                       else spec.dtype.as_numpy_dtype)
    if spec.dtype.name == "string":
        return np.full(shape, b"warm-up", dtype=object)
    return np.ones(shape, dtype=spec.dtype.as_numpy_dtype)


def _tf_error_summary(message: str, max_chars: int = 500) -> str:
    """The informative part of a TF runtime error (e.g. a failed assertion's text)."""
    noise = ("Graph execution error", "Detected at node", "<stack traces", "[[")
    lines = [line.strip() for line in message.splitlines()]
    kept = [line for line in lines if line and not line.startswith(noise)]
    summary = re.sub(r"\s*\[Op:[^\]]*\]$", "", " ".join(kept)) or first_line(message)
    return summary[:max_chars]
