#!/usr/bin/env python3
"""A local server that speaks TensorFlow Serving's REST API, for machines without TF Serving.

  python serving/server.py --model_base_path=models/tetra --model_name=tetra \
      --rest_api_port=8501 [--rest_api_host=127.0.0.1]

Serves the highest numeric version under --model_base_path (TF Serving's layout:
BASE/1/saved_model.pb, BASE/2/...), built generically from the SavedModel's signatures:

  GET  /v1/models/NAME[/versions/N]             model status
  GET  /v1/models/NAME[/versions/N]/metadata    signature defs
  POST /v1/models/NAME[/versions/N]:predict     {"instances": [...]} -> {"predictions": [...]}
                                                {"inputs": ...}      -> {"outputs": ...}

Request and response bodies follow TF Serving's JSON formats: strings are UTF-8 text, binary
inputs may be sent as {"b64": "..."}, and string outputs whose name ends in "_bytes" are
returned as {"b64": "..."}. Errors are {"error": "message"} with a 4xx code for bad requests
(413 for a body over --max_request_bytes) and 500 for internal failures; the server keeps
serving after any of them. String inputs named in --sentence_inputs are checked before
TensorFlow sees them: valid UTF-8, at least one word, at most --max_words_per_sentence words;
so are pre-split rows of --word_inputs (with their num_words). TensorFlow Text is imported
(when installed) before loading, for models that use its ops. See serving/README.md.

Exit codes: 0 after a clean shutdown (SIGINT or SIGTERM); 2 for a usage or input error (bad
flags, no servable version under --model_base_path); 1 for any other failure (the model
fails to load, the port is taken).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import json
import logging
import logging.handlers
import os
import queue
import re
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any, Callable, Iterable, Iterator

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 2, before TensorFlow is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import flask  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from absl import logging as absl_logging  # noqa: E402
from werkzeug import exceptions as http_errors  # noqa: E402

import batching  # noqa: E402  (serving/batching.py, beside this script)

PROGRAM = "server.py"
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
DEFAULT_SIGNATURE = "serving_default"
MAX_INPUT_RANK = 8  # Deeper JSON nesting in an input is rejected before it becomes a tensor.
NUM_WORDS_INPUT = "num_words"  # With a word input: how many leading entries of a row are words.

_PREDICT_PATH = re.compile(r"/v1/models/([^/:]+)(?:/versions/(\d+))?:(classify|regress|predict)",
                           re.IGNORECASE)
_METADATA_PATH = re.compile(r"/v1/models/([^/:]+)(?:/versions/(\d+))?/metadata", re.IGNORECASE)
_STATUS_PATH = re.compile(r"/v1/models(?:/([^/:]+))?(?:/versions/(\d+))?", re.IGNORECASE)


MAX_INT64 = (1 << 63) - 1
MAX_JSON_INTEGER_DIGITS = 20  # int64 and uint64 fit; longer integers are rejected, not parsed.


class UsageError(Exception):
    """A mistake in the command line or its inputs (exit code 2)."""


class RequestError(Exception):
    """A request that cannot be served; becomes {"error": message} with this HTTP status."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds on one predict request, checked before TensorFlow sees it."""

    max_batch_size: int = 64
    max_words_per_sentence: int = 1000
    max_words_per_request: int = 16384
    sentence_inputs: tuple[str, ...] = ("sentences",)
    word_inputs: tuple[str, ...] = ("words",)
    max_pieces_per_request: int = 32768  # tetra_tf.tokenization.MAX_PIECES_PER_CALL


ENCODER_VOCAB_ASSET = os.path.join("assets", "encoder_vocab.txt")


class PieceCounter:
    """Counts a request's WordPiece pieces as the export's graph will, before it runs.

    Uses tetra_tf.tokenization.SubwordTokenizer on the export's own vocabulary asset. A
    word's pieces past MAX_PIECES_PER_WORD are truncated by the graph, so a word counts
    min(pieces, MAX_PIECES_PER_WORD). Lower-casing is inferred from the vocabulary (an
    uncased BERT vocabulary has no upper-case entries besides [CLS]-style tokens).
    """

    def __init__(self, vocab_path: str) -> None:
        import tensorflow as tf

        from tetra_tf import tokenization

        vocab = tokenization.read_vocab(vocab_path)
        lower_case = not any(token != token.lower() for token in vocab
                             if not (token.startswith("[") and token.endswith("]")))
        self.max_pieces_per_word = tokenization.MAX_PIECES_PER_WORD
        self._tokenizer = tokenization.SubwordTokenizer(vocab_path, lower_case=lower_case)
        cap = self.max_pieces_per_word

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def count(words: tf.Tensor) -> tf.Tensor:
            pieces = self._tokenizer.tokenize_flat_words(words).row_lengths()
            return tf.minimum(tf.cast(pieces, tf.int32), cap)

        self._count = count
        self.count([b"warm-up"])  # Traces now, not on the first request.

    def count(self, words: list[bytes]) -> np.ndarray:
        """Pieces per word (each at most max_pieces_per_word), int32 [len(words)]."""
        if not words:
            return np.zeros([0], np.int32)
        return self._count(np.array(words, dtype=object)).numpy()


# ----------------------------------------------------------------------------------------
# The model: version discovery, loading, metadata and predict.


def find_latest_version(base_path: str) -> tuple[int, str]:
    """Returns (version, export_dir) of the highest numeric version holding a SavedModel.

    Raises:
      UsageError: base_path is not a directory or holds no version directory with a
        saved_model.pb (or .pbtxt).
    """
    if not os.path.isdir(base_path):
        raise UsageError(f"--model_base_path {base_path!r} is not a directory")
    if os.path.isfile(os.path.join(base_path, "saved_model.pb")):
        raise UsageError(f"{base_path!r} is a SavedModel itself; --model_base_path is the "
                         "directory above its numbered version directories")
    versions = []
    for entry in os.listdir(base_path):
        export_dir = os.path.join(base_path, entry)
        if entry.isdigit() and any(
                os.path.isfile(os.path.join(export_dir, name))
                for name in ("saved_model.pb", "saved_model.pbtxt")):
            versions.append((int(entry), export_dir))
    if not versions:
        raise UsageError(f"no servable version under {base_path!r} (expected numbered "
                         "directories such as 1/saved_model.pb)")
    return max(versions)


def _read_signature_defs(export_dir: str, tags: str = "serve") -> dict[str, Any]:
    """Returns the SignatureDef protos of the MetaGraph tagged `tags`, by signature name."""
    from google.protobuf import text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    binary_path = os.path.join(export_dir, "saved_model.pb")
    if os.path.isfile(binary_path):
        with open(binary_path, "rb") as f:
            saved_model.ParseFromString(f.read())
    else:
        with open(os.path.join(export_dir, "saved_model.pbtxt"), encoding="utf-8") as f:
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


@dataclasses.dataclass
class Prepared:
    """A checked predict request: its inputs, rows, and per-row pieces and words."""

    signature_name: str
    inputs: dict[str, np.ndarray]
    batch_size: int
    row_pieces: np.ndarray | None = None  # subword pieces per row (sentence inputs only)
    row_widths: np.ndarray | None = None  # words per row (sentence or word inputs)


class ServedModel:
    """One loaded SavedModel version: its signatures, metadata and a guarded predict."""

    def __init__(self, name: str, version: int, export_dir: str,
                 max_concurrent_predictions: int = 1,
                 on_call_seconds: Callable[[float], None] | None = None) -> None:
        """Loads export_dir (importing tensorflow_text first, when installed).

        Args:
          name: the model name in request paths.
          version: the version number reported and accepted in paths.
          export_dir: the SavedModel directory.
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
        self.signature_defs = _read_signature_defs(export_dir)
        self._loaded = tf.saved_model.load(export_dir, tags=["serve"])
        self._functions = dict(self._loaded.signatures)
        self._input_specs = {
            name: dict(function.structured_input_signature[1])
            for name, function in self._functions.items()}
        self._model_calls = threading.BoundedSemaphore(max_concurrent_predictions)
        self._on_call_seconds = on_call_seconds
        vocab_path = os.path.join(export_dir, ENCODER_VOCAB_ASSET)
        self.piece_counter = PieceCounter(vocab_path) if os.path.isfile(vocab_path) else None

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
        signature_name = signature_name or DEFAULT_SIGNATURE
        if signature_name not in self._functions:
            # TF Serving answers an unknown signature with INVALID_ARGUMENT, i.e. HTTP 400.
            raise RequestError(f'Serving signature name: "{_log_safe(signature_name, 100)}" '
                               f"not found in signature def (available: "
                               f"{', '.join(self.signature_names)})")
        return signature_name

    def input_specs(self, signature_name: str) -> dict[str, Any]:
        return self._input_specs[signature_name]

    def predict_json(self, body: bytes, limits: Limits,
                     run: Callable[["ServedModel", "Prepared"], dict[str, np.ndarray]]
                     ) -> tuple[dict[str, Any], int]:
        """Runs a TF Serving REST predict body; returns (response JSON, batch size).

        Args:
          run: runs a prepared request on this model (directly, or through the batcher).

        Raises:
          RequestError: the request is malformed or out of limits (4xx), or the model
            failed (500).
        """
        request = _parse_json_object(body)
        signature_name = request.get("signature_name", DEFAULT_SIGNATURE)
        if not isinstance(signature_name, str):
            raise RequestError("'signature_name' must be a string")
        signature_name = self.signature(signature_name)
        inputs, row_format = _request_inputs(request, self._input_specs[signature_name],
                                             limits)
        prepared = self.prepare(signature_name, inputs, limits)
        outputs = run(self, prepared)
        batch_size = prepared.batch_size
        if row_format:
            return {"predictions": _rows_json(outputs, batch_size)}, batch_size
        if len(outputs) == 1:
            return {"outputs": _array_json(*next(iter(outputs.items())))}, batch_size
        return {"outputs": {name: _array_json(name, value)
                            for name, value in outputs.items()}}, batch_size

    def prepare(self, signature_name: str, inputs: dict[str, np.ndarray],
                limits: Limits) -> "Prepared":
        """Checks a request's input arrays against the limits, before the model runs.

        Sentences and word rows are checked (UTF-8, word counts), then their subword pieces
        are counted (when the export ships its encoder vocabulary).

        Raises:
          RequestError: a check failed (400).
        """
        row_words: list[list[bytes]] | None = None
        for name, array in sorted(inputs.items()):
            if array.dtype != object:
                continue
            if name in limits.sentence_inputs:
                row_words = _check_sentences(name, array, limits)
            elif name in limits.word_inputs and array.ndim >= 2:
                row_words = _check_word_rows(name, array, inputs.get(NUM_WORDS_INPUT), limits)
        batch_size = _check_batch(inputs, limits)
        row_widths = (np.array([len(words) for words in row_words], np.int64)
                      if row_words is not None else None)
        row_pieces = None
        if row_widths is not None and self.piece_counter is not None:
            cap = self.piece_counter.max_pieces_per_word
            if cap * int(row_widths.sum()) <= limits.max_pieces_per_request:
                # Within the limit whatever the words are: skip tokenizing (the costly
                # part), and let the upper bound stand for the pieces when merging.
                row_pieces = cap * row_widths
            else:
                counts = self.piece_counter.count([w for words in row_words for w in words])
                row_pieces = np.array([int(part.sum()) for part in
                                       np.split(counts, np.cumsum(row_widths)[:-1])])
            total = int(row_pieces.sum())
            if total > limits.max_pieces_per_request:
                raise RequestError(
                    f"the request has {total} subword pieces (a word counts at most "
                    f"{self.piece_counter.max_pieces_per_word}), more than "
                    f"--max_pieces_per_request={limits.max_pieces_per_request}")
        return Prepared(signature_name, inputs, batch_size, row_pieces, row_widths)

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
                raise RequestError(f"Internal: {type(e).__name__}: {_first_line(str(e))}",
                                   500) from e
            finally:
                if self._on_call_seconds is not None:
                    self._on_call_seconds(time.perf_counter() - started)
        return outputs


def parse_version(text: str) -> int:
    """A version number from a request path (TF Serving's versions are int64).

    Raises:
      RequestError: not an int64 (400), e.g. a 5,000-digit number.
    """
    if not text.isdigit() or len(text) > 19 or int(text) > MAX_INT64:
        raise RequestError(f"Invalid version {_log_safe(text, 40)!s}: not an int64")
    return int(text)


def _log_safe(text: str, max_chars: int = 300) -> str:
    """Request data made safe for one log line: control characters and non-ASCII
    escaped (so a %0a in a path cannot start a new line), long text cut."""
    escaped = text.encode("ascii", "backslashreplace").decode("ascii")
    escaped = re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", escaped)
    return escaped if len(escaped) <= max_chars else escaped[:max_chars] + "...(cut)"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "(no message)"


def _tf_error_summary(message: str, max_chars: int = 500) -> str:
    """The informative part of a TF runtime error (e.g. a failed assertion's text)."""
    noise = ("Graph execution error", "Detected at node", "<stack traces", "[[")
    lines = [line.strip() for line in message.splitlines()]
    kept = [line for line in lines if line and not line.startswith(noise)]
    summary = re.sub(r"\s*\[Op:[^\]]*\]$", "", " ".join(kept)) or _first_line(message)
    return summary[:max_chars]


# ----------------------------------------------------------------------------------------
# Request decoding and checks.


def _parse_json_object(body: bytes) -> dict[str, Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"Request body is not valid UTF-8: byte {e.start}") from e
    try:
        request = json.loads(text, parse_int=_parse_json_integer)
    except json.JSONDecodeError as e:
        raise RequestError(f"JSON Parse error: {e.msg} at offset {e.pos}") from e
    except RecursionError as e:
        raise RequestError("JSON Parse error: nested too deeply") from e
    except ValueError as e:  # Any other number the parser cannot convert.
        raise RequestError(f"JSON Parse error: {_first_line(str(e))[:200]}") from e
    if not isinstance(request, dict):
        raise RequestError("Request body must be a JSON object with 'instances' or 'inputs'")
    return request


def _parse_json_integer(text: str) -> int:
    """json's parse_int: rejects integers too long for any tensor dtype before converting
    them (Python refuses past 4,300 digits, and converting is quadratic before that)."""
    if len(text.lstrip("-")) > MAX_JSON_INTEGER_DIGITS:
        raise RequestError(f"JSON Parse error: an integer of {len(text)} characters is out "
                           "of range for every tensor dtype")
    return int(text)


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and list(value) == ["b64"]


def _request_inputs(request: dict[str, Any], specs: dict[str, Any],
                    limits: Limits) -> tuple[dict[str, np.ndarray], bool]:
    """Returns ({input name: array}, row_format) from a row or columnar request."""
    has_instances, has_inputs = "instances" in request, "inputs" in request
    if has_instances == has_inputs:
        raise RequestError("Missing 'inputs' or 'instances' key" if not has_instances else
                           "Not formatted correctly expecting only one of 'inputs' or "
                           "'instances' keys exist")
    names = sorted(specs)
    if has_instances:
        instances = request["instances"]
        if not isinstance(instances, list) or not instances:
            raise RequestError("Expecting 'instances' to be a non-empty list/array")
        if len(instances) > limits.max_batch_size:
            raise RequestError(f"Too many instances: {len(instances)} > --max_batch_size="
                               f"{limits.max_batch_size}")
        columns: dict[str, list[Any]] = {name: [] for name in names}
        for index, instance in enumerate(instances):
            if isinstance(instance, dict) and not _is_b64(instance):
                _check_input_names(instance, names, f"instance {index}")
                for name in names:
                    columns[name].append(instance[name])
            elif len(names) == 1:
                columns[names[0]].append(instance)
            else:
                raise RequestError(f"instance {index}: expected an object with the named "
                                   f"inputs {names}")
        values = columns
    else:
        value = request["inputs"]
        if isinstance(value, dict) and not _is_b64(value):
            _check_input_names(value, names, "'inputs'")
            values = value
        elif len(names) == 1:
            values = {names[0]: value}
        else:
            raise RequestError(f"'inputs' must be an object with the named inputs {names}")
    arrays = {name: _json_to_array(values[name], specs[name], name) for name in names}
    return arrays, has_instances


def _check_input_names(value: dict[str, Any], names: list[str], where: str) -> None:
    missing = [name for name in names if name not in value]
    unknown = sorted(set(value) - set(names))
    if missing:
        raise RequestError(f"{where}: missing named input(s) {missing} (expected {names})")
    if unknown:
        raise RequestError(f"{where}: unknown input(s) {unknown} (expected {names})")


def _flatten(value: Any, depth: int = 0) -> tuple[list[int], list[Any]]:
    """Returns (shape, leaves in row-major order) of a rectangular nested JSON list."""
    if not isinstance(value, list):
        return [], [value]
    if depth >= MAX_INPUT_RANK:
        raise RequestError(f"input nested deeper than {MAX_INPUT_RANK} levels")
    if not value:
        return [0], []
    shape, leaves = None, []
    for item in value:
        item_shape, item_leaves = _flatten(item, depth + 1)
        if shape is None:
            shape = item_shape
        elif item_shape != shape:
            raise RequestError("input lists are ragged (all rows must have the same length)")
        leaves.extend(item_leaves)
    return [len(value)] + shape, leaves


def _json_to_array(value: Any, spec: Any, name: str) -> np.ndarray:
    """Converts a JSON input to an array of spec's dtype and a shape compatible with spec."""
    shape, leaves = _flatten(value)
    dtype = spec.dtype
    if dtype.is_floating or dtype.is_integer or dtype.is_bool:
        for leaf in leaves:
            ok = (isinstance(leaf, bool) if dtype.is_bool else
                  isinstance(leaf, int) and not isinstance(leaf, bool) if dtype.is_integer else
                  isinstance(leaf, (int, float)) and not isinstance(leaf, bool))
            if not ok:
                raise RequestError(f"input '{name}' expects {dtype.name} values, got "
                                   f"{type(leaf).__name__}")
        if dtype.is_integer and leaves and not (dtype.min <= min(leaves)
                                                and max(leaves) <= dtype.max):
            raise RequestError(f"input '{name}': value out of range for {dtype.name}")
        array = np.array(leaves, dtype=dtype.as_numpy_dtype).reshape(shape)
    elif dtype.name == "string":
        array = np.empty(len(leaves), dtype=object)
        array[:] = [_string_leaf(leaf, name) for leaf in leaves]
        array = array.reshape(shape)
    else:
        raise RequestError(f"input '{name}' has dtype {dtype.name}, which this server "
                           "does not accept as JSON", 400)
    if not spec.shape.is_compatible_with(array.shape):
        expected = spec.shape.as_list() if spec.shape.rank is not None else "any shape"
        raise RequestError(f"input '{name}' has shape {list(array.shape)}, but the signature "
                           f"expects {expected} (None: any size)")
    return array


def _string_leaf(leaf: Any, name: str) -> bytes:
    if isinstance(leaf, str):
        try:
            return leaf.encode("utf-8")
        except UnicodeEncodeError as e:  # Lone surrogates from "\ud800"-style escapes.
            raise RequestError(f"input '{name}' is not valid UTF-8 (unpaired surrogate "
                               f"at character {e.start})") from e
    if _is_b64(leaf) and isinstance(leaf["b64"], str):
        try:
            return base64.b64decode(leaf["b64"], validate=True)
        except (binascii.Error, ValueError) as e:
            raise RequestError(f"input '{name}': invalid base64 in {{\"b64\": ...}}") from e
    raise RequestError(f"input '{name}' expects strings (or {{\"b64\": \"...\"}}), got "
                       f"{type(leaf).__name__}")


def _check_sentences(name: str, array: np.ndarray, limits: Limits) -> list[list[bytes]]:
    """Checks sentences (valid UTF-8, 1 to max words); returns each one's words."""
    total_words = 0
    row_words = []
    for index, sentence in enumerate(array.reshape(-1)):
        try:
            sentence.decode("utf-8")  # Only checked: the words stay bytes.
        except UnicodeDecodeError as e:
            raise RequestError(f"input '{name}' sentence {index} is not valid UTF-8 "
                               f"(byte {e.start})") from e
        words = sentence.split()  # ASCII whitespace, as tf.strings.split in the graph.
        num_words = len(words)
        row_words.append(words)
        if num_words == 0:
            raise RequestError(f"input '{name}' sentence {index} is empty (no words)")
        if num_words > limits.max_words_per_sentence:
            raise RequestError(f"input '{name}' sentence {index} has {num_words} words, more "
                               f"than --max_words_per_sentence={limits.max_words_per_sentence}")
        total_words += num_words
    if total_words > limits.max_words_per_request:
        raise RequestError(f"input '{name}' has {total_words} words in all, more than "
                           f"--max_words_per_request={limits.max_words_per_request}")
    return row_words


def _check_word_rows(name: str, words: np.ndarray, num_words: np.ndarray | None,
                     limits: Limits) -> list[list[bytes]]:
    """Checks pre-split sentences: rows of words [..., W], with num_words [...] words each."""
    width = words.shape[-1]
    if width > limits.max_words_per_sentence:
        raise RequestError(f"input '{name}' has rows of {width} words, more than "
                           f"--max_words_per_sentence={limits.max_words_per_sentence}")
    if words.size > limits.max_words_per_request:
        raise RequestError(f"input '{name}' has {words.size} words in all, more than "
                           f"--max_words_per_request={limits.max_words_per_request}")
    rows = words.reshape(-1, width)
    if num_words is None:
        counts = np.full(len(rows), width)
    elif num_words.shape == words.shape[:-1]:
        counts = num_words.reshape(-1)
    else:
        raise RequestError(f"input '{NUM_WORDS_INPUT}' has shape {list(num_words.shape)}; "
                           f"expected {list(words.shape[:-1])} to match '{name}'")
    for index, (row, count) in enumerate(zip(rows, counts)):
        if not 1 <= count <= width:
            raise RequestError(f"sentence {index}: {NUM_WORDS_INPUT}={count} is not between 1 "
                               f"and the width of '{name}' ({width})")
        for position, word in enumerate(row[:count]):
            try:
                text = word.decode("utf-8")
            except UnicodeDecodeError as e:
                raise RequestError(f"input '{name}' sentence {index} word {position} is not "
                                   "valid UTF-8") from e
            if not text or len(text.split()) != 1 or text.strip() != text:
                raise RequestError(f"input '{name}' sentence {index} word {position} "
                                   f"({_log_safe(text, 100)!r}) is empty or contains "
                                   "whitespace")
    return [list(row[:count]) for row, count in zip(rows, counts)]


def _check_batch(inputs: dict[str, np.ndarray], limits: Limits) -> int:
    """Returns the batch size (the leading dimension of the inputs), checked against limits."""
    sizes = {value.shape[0] for value in inputs.values() if value.ndim > 0}
    batch_size = max(sizes) if sizes else 1
    if 0 in sizes:
        raise RequestError("empty batch: inputs need at least one element")
    if batch_size > limits.max_batch_size:
        raise RequestError(f"batch of {batch_size} > --max_batch_size={limits.max_batch_size}")
    return batch_size


# ----------------------------------------------------------------------------------------
# Response encoding.


# Output dtypes whose TensorProto is built directly (tensor_content: the array's bytes):
# tf.make_tensor_proto takes 5x as long, 0.19 ms per one-sentence answer of the parser.
_TENSOR_CONTENT_DTYPES = {np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64")}


def tensor_proto(array: np.ndarray) -> Any:
    """An output array as a TensorProto, as tf.make_tensor_proto makes it (which it falls
    back to for other dtypes), for what tf.make_ndarray gives back."""
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2

    if array.dtype == object:
        proto = tensor_pb2.TensorProto(dtype=tf.string.as_datatype_enum)
        proto.string_val.extend(item if isinstance(item, bytes) else str(item).encode()
                                for item in array.reshape(-1))
    elif array.dtype in _TENSOR_CONTENT_DTYPES:
        proto = tensor_pb2.TensorProto(dtype=tf.as_dtype(array.dtype).as_datatype_enum)
        proto.tensor_content = np.ascontiguousarray(array, array.dtype.newbyteorder("<")
                                                    ).tobytes()
    else:
        return tf.make_tensor_proto(array)
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


def _array_json(name: str, array: np.ndarray) -> Any:
    """An output array as nested JSON lists, strings as UTF-8 text (b64 for *_bytes)."""
    if array.dtype == object or array.dtype.kind == "S":
        if name.endswith("_bytes"):
            convert: Callable[[Any], Any] = (
                lambda b: {"b64": base64.b64encode(b).decode("ascii")})
        else:
            convert = lambda b: b.decode("utf-8", errors="replace")  # noqa: E731
    elif array.dtype == np.float32:
        convert = _shortest_float
    else:
        return array.tolist()
    flat = [convert(x) for x in array.reshape(-1)]
    if array.ndim == 0:
        return flat[0]
    return _reshape(flat, list(array.shape))


def _shortest_float(value: np.float32) -> float:
    """A float32 as the double with its shortest repr (0.1, not 0.10000000149011612)."""
    if not np.isfinite(value):
        return float(value)
    return float(np.format_float_positional(value, unique=True))


def _reshape(flat: list[Any], shape: list[int]) -> list[Any]:
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_reshape(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _rows_json(outputs: dict[str, np.ndarray], batch_size: int) -> list[Any]:
    """Row format: one prediction per instance (a bare value when there is one output)."""
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != batch_size:
            raise RequestError(f"Internal: output '{name}' has shape {list(value.shape)}, not "
                               f"batch-major with batch size {batch_size}; use the columnar "
                               "'inputs' format", 500)
    columns = {name: _array_json(name, value) for name, value in outputs.items()}
    if len(columns) == 1:
        return next(iter(columns.values()))
    return [{name: column[i] for name, column in columns.items()} for i in range(batch_size)]


# ----------------------------------------------------------------------------------------
# The HTTP application.


def _json_response(payload: Any, status: int = 200) -> flask.Response:
    body = json.dumps(payload, ensure_ascii=False, indent=None).encode("utf-8")
    return flask.Response(body, status=status, mimetype="application/json")


class ModelManager:
    """The served versions of one model: the one new requests get, and lookups by version.

    Requests hold a version while they run (acquire). With a base path to watch
    (TF Serving's --file_system_poll_wait_seconds), a new highest version is loaded in the
    background, new requests switch to it, and the old one is unloaded once its last
    request has finished; a version that fails to load is logged and the old one keeps
    serving.
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
        self._failed: dict[int, float] = {}  # version → its saved_model.pb's mtime
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    @property
    def current(self) -> ServedModel:
        with self._lock:
            return self._current

    @contextlib.contextmanager
    def acquire(self, model_name: str, version: str | None,
                missing: str = "Servable not found for request: {spec}"
                ) -> Iterator[ServedModel]:
        """Yields the requested version (the current one if None) while a request runs.

        Raises:
          RequestError: unknown model or version (404), or a malformed version (400).
        """
        number = parse_version(version) if version is not None else None
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

    def status_json(self, model_name: str, version: str | None) -> dict[str, Any]:
        if model_name != self.name:
            raise RequestError(f"Could not find any versions of model {model_name}", 404)
        current = self.current
        if version is not None and parse_version(version) != current.version:
            raise RequestError(f"Could not find version {version} of model {model_name}",
                               404)
        return current.status_json()

    def watch(self, base_path: str, poll_wait_s: float) -> None:
        """Polls base_path every poll_wait_s seconds for a new highest version."""
        def poll_forever() -> None:
            while not self._stop.wait(poll_wait_s):
                try:
                    self.poll(base_path)
                except Exception:  # noqa: BLE001 - keep serving; say why in the log.
                    absl_logging.error("polling %s failed:\n%s", base_path,
                                       traceback.format_exc())

        self._poller = threading.Thread(target=poll_forever, name="version-poller",
                                        daemon=True)
        self._poller.start()

    def stop(self) -> None:
        self._stop.set()

    def poll(self, base_path: str) -> None:
        """Loads and switches to the highest version under base_path, if it is new."""
        try:
            version, export_dir = find_latest_version(base_path)
        except UsageError:
            return  # No version there (for now): keep serving the loaded one.
        if version == self.current.version or self._load is None:
            return
        stamp = _saved_model_mtime(export_dir)
        if self._failed.get(version) == stamp:
            return  # Already failed to load, and unchanged since.
        absl_logging.info("loading model %r version %d from %s", self.name, version,
                          export_dir)
        try:
            model = self._load(version, export_dir)
        except Exception as e:  # noqa: BLE001 - the old version keeps serving.
            self._failed[version] = stamp
            absl_logging.error("failed to load version %d from %s, still serving version "
                               "%d: %s: %s", version, export_dir, self.current.version,
                               type(e).__name__, _first_line(str(e))[:500])
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


def _saved_model_mtime(export_dir: str) -> float:
    for name in ("saved_model.pb", "saved_model.pbtxt"):
        try:
            return os.path.getmtime(os.path.join(export_dir, name))
        except OSError:
            continue
    return 0.0


Runner = Callable[[ServedModel, Prepared], dict[str, np.ndarray]]

# TF Serving's status codes (gRPC's) for the HTTP statuses this server answers.
STATUS_CODES = {200: "OK", 400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 405: "INVALID_ARGUMENT",
                413: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 501: "UNIMPLEMENTED",
                503: "UNAVAILABLE"}


class _UnlockedQueueHandler(logging.handlers.QueueHandler):
    """A QueueHandler that emits without taking the handler lock: its queue's put is
    already thread-safe, and request threads would otherwise queue for that lock."""

    def handle(self, record: logging.LogRecord) -> bool | logging.LogRecord:
        filtered = self.filter(record)
        if isinstance(filtered, logging.LogRecord):  # Python 3.12+: a filter may replace it.
            record = filtered
        if filtered:
            self.emit(record)
        return filtered


class AccessLog:
    """The one-line-per-request log, written by a background thread.

    A request thread only builds its record and puts it on a queue; one listener thread
    hands the records, in order, to absl's handler. Logging in the request threads
    themselves made them queue for the handler's lock: at 32 concurrent clients that cost
    about 2.7 ms of CPU per request, taken from the model calls. (absl's line prefix shows
    the id of the thread that writes, so every request line shows the listener's.)
    """

    def __init__(self, handler: logging.Handler | None = None,
                 level: int | None = None) -> None:
        """Args:
          handler: where the lines go (default: absl's handler, i.e. stderr).
          level: lines are INFO, so below this they are dropped (default: absl's level,
            which --verbosity sets).
        """
        records: queue.SimpleQueue = queue.SimpleQueue()
        self._logger = logging.Logger("tetra_serving.access")
        self._logger.setLevel(level if level is not None
                              else absl_logging.get_absl_logger().getEffectiveLevel())
        self._logger.addHandler(_UnlockedQueueHandler(records))
        self._listener = logging.handlers.QueueListener(
            records, handler or absl_logging.get_absl_handler())
        self._listener.start()

    def info(self, message: str, *args: Any) -> None:
        self._logger.info(message, *args, stacklevel=2)

    def stop(self) -> None:
        """Writes the lines still queued, then ends the listener thread."""
        self._listener.stop()


class Metrics:
    """Prometheus metrics, served at /monitoring/prometheus/metrics (TF Serving's path)."""

    def __init__(self) -> None:
        import prometheus_client

        self.registry = prometheus_client.CollectorRegistry()
        self.requests = prometheus_client.Counter(
            "tetra_serving_requests", "Requests answered, by API, method and TF Serving "
            "status code (OK, INVALID_ARGUMENT, UNAVAILABLE, ...).",
            ["api", "method", "status"], registry=self.registry)
        self.latency = prometheus_client.Histogram(
            "tetra_serving_request_latency_seconds", "Time from a request's arrival (body "
            "read) to its answer.", ["api", "method"], registry=self.registry,
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.batch_size = prometheus_client.Histogram(
            "tetra_serving_batch_size", "Rows per model call (merged requests with "
            "batching).", registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
        self.model_call_seconds = prometheus_client.Histogram(
            "tetra_serving_model_call_seconds", "Time of each model call (one merged batch "
            "with batching), not counting its wait for a model slot; with one slot, its "
            "sum's rate is the share of time the model runs.",
            registry=self.registry,
            buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.queue_depth = prometheus_client.Gauge(
            "tetra_serving_queue_depth", "Rows waiting in the batch queues.",
            registry=self.registry)
        self.model_version = prometheus_client.Gauge(
            "tetra_serving_model_version", "The version new requests are served by.",
            registry=self.registry)

    def observe(self, api: str, method: str, status: str, seconds: float) -> None:
        self.requests.labels(api, method, status).inc()
        self.latency.labels(api, method).observe(seconds)

    def exposition(self) -> tuple[bytes, str]:
        import prometheus_client

        return (prometheus_client.generate_latest(self.registry),
                prometheus_client.CONTENT_TYPE_LATEST)


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

    One scheduler per loaded version and one queue per signature and input shape. A
    request over a batch's rows (or over --max_pieces_per_request merged) is split into
    slices. When a merged call fails, its requests run again one by one, so a request
    that fails only fails itself.
    """

    def __init__(self, params: "batching.BatchingParameters", limits: Limits,
                 metrics: Metrics | None = None) -> None:
        self.params = params
        self._limits = limits
        self._metrics = metrics
        self._lock = threading.Lock()
        self._schedulers: dict[int, batching.BatchScheduler] = {}
        if metrics:
            metrics.queue_depth.set_function(self.queued_rows)

    def queued_rows(self) -> int:
        with self._lock:
            schedulers = list(self._schedulers.values())
        return sum(s.queued_rows() for s in schedulers)

    def _scheduler(self, model: ServedModel) -> "batching.BatchScheduler":
        with self._lock:
            scheduler = self._schedulers.get(model.version)
            if scheduler is None:
                max_cost = (self._limits.max_pieces_per_request
                            if model.piece_counter is not None else None)
                scheduler = batching.BatchScheduler(
                    self.params, lambda tasks: self._run_batch(model, tasks), max_cost,
                    name=f"batch-v{model.version}")
                self._schedulers[model.version] = scheduler
            return scheduler

    def unload(self, model: ServedModel) -> None:
        with self._lock:
            scheduler = self._schedulers.pop(model.version, None)
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
        pad_names = set(self._limits.word_inputs)
        key = (prepared.signature_name,) + tuple(sorted(
            (name, value.shape[1:] if name not in pad_names else value.ndim)
            for name, value in prepared.inputs.items()))
        tasks = []
        for start, stop in self._slices(prepared):
            widths = prepared.row_widths
            tasks.append(batching.Task(
                key, stop - start,
                int(prepared.row_pieces[start:stop].sum()) if prepared.row_pieces is not None
                else 0,
                ({name: value[start:stop] for name, value in prepared.inputs.items()},
                 int(widths[start:stop].max()) if widths is not None else None)))
        scheduler = self._scheduler(model)
        try:
            for task in tasks:
                scheduler.submit(task)
        except batching.QueueFullError as e:
            raise RequestError(f"Unavailable: {e}", 503) from None
        parts = [task.wait() for task in tasks]
        width = int(prepared.row_widths.max()) if prepared.row_widths is not None else None
        return batching.join_outputs(parts, width)

    def _slices(self, prepared: Prepared) -> list[tuple[int, int]]:
        """Row ranges of at most a batch's rows and (with pieces) the pieces budget."""
        max_rows = self.params.execution_batch_size
        pieces = prepared.row_pieces
        slices, start, cost = [], 0, 0
        for row in range(prepared.batch_size):
            row_cost = int(pieces[row]) if pieces is not None else 0
            if row > start and (row - start >= max_rows or (
                    pieces is not None and cost + row_cost >
                    self._limits.max_pieces_per_request)):
                slices.append((start, row))
                start, cost = row, 0
            cost += row_cost
        slices.append((start, prepared.batch_size))
        return slices

    def _run_batch(self, model: ServedModel, tasks: list["batching.Task"]) -> None:
        rows = sum(task.rows for task in tasks)
        padded_rows = self.params.padded_size(rows)
        inputs = batching.merge_inputs([task.payload[0] for task in tasks],
                                       set(self._limits.word_inputs), padded_rows)
        if self._metrics:
            self._metrics.batch_size.observe(padded_rows)
        signature_name = tasks[0].key[0]
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
            if len(tasks) > 1:  # Find the request(s) at fault: each one alone.
                for task in tasks:
                    self._run_batch(model, [task])
                return
            if isinstance(e, ValueError):
                e = RequestError(f"Internal: {e}", 500)
            tasks[0].finish(error=e)
            return
        for task, part in zip(tasks, parts):
            task.finish(part)


def _rest_method(path: str) -> str:
    """The metrics' method label for a REST path."""
    if _PREDICT_PATH.fullmatch(path):
        return "predict"
    if _METADATA_PATH.fullmatch(path):
        return "metadata"
    if _STATUS_PATH.fullmatch(path):
        return "status"
    return "metrics" if path == METRICS_PATH else "other"


METRICS_PATH = "/monitoring/prometheus/metrics"


def create_app(manager: ModelManager, limits: Limits, max_request_bytes: int = 1 << 20,
               run: Runner | None = None, metrics: Metrics | None = None,
               log_request: Callable[..., None] = absl_logging.info) -> flask.Flask:
    """A Flask app serving the manager's model with TF Serving's REST paths and JSON.

    Args:
      log_request: logs a request's line (format, *args), e.g. `AccessLog.info`.
    """
    run = run or DirectRunner(metrics)
    flask_app = flask.Flask("tetra_serving")
    flask_app.config["MAX_CONTENT_LENGTH"] = max_request_bytes
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]

    @flask_app.before_request
    def _start_clock() -> None:
        flask.g.start_time = time.perf_counter()
        flask.g.batch_size = None

    @flask_app.after_request
    def _log_request(response: flask.Response) -> flask.Response:
        elapsed_ms = (time.perf_counter() - flask.g.get("start_time", time.perf_counter())) * 1e3
        batch = flask.g.get("batch_size")
        # The path is request data: escaped, so that it cannot forge log lines.
        log_request("%s %s %s %d %.1fms%s", flask.request.remote_addr,
                    _log_safe(flask.request.method, 20), _log_safe(flask.request.path),
                    response.status_code, elapsed_ms,
                    f" batch={batch}" if batch is not None else "")
        if metrics is not None:
            metrics.observe("rest", _rest_method(flask.request.path),
                            STATUS_CODES.get(response.status_code,
                                             str(response.status_code)), elapsed_ms / 1e3)
        return response

    @flask_app.errorhandler(RequestError)
    def _request_error(error: RequestError) -> flask.Response:
        return _json_response({"error": str(error)}, error.status)

    @flask_app.errorhandler(http_errors.HTTPException)
    def _http_error(error: http_errors.HTTPException) -> flask.Response:
        message = error.description or error.name
        if isinstance(error, http_errors.RequestEntityTooLarge):
            message = f"Request body is larger than --max_request_bytes={max_request_bytes}"
        response = _json_response({"error": message}, error.code or 500)
        if isinstance(error, http_errors.MethodNotAllowed) and error.valid_methods:
            response.headers["Allow"] = ", ".join(error.valid_methods)
        return response

    @flask_app.errorhandler(Exception)
    def _internal_error(error: Exception) -> flask.Response:
        absl_logging.error("internal error:\n%s", traceback.format_exc())
        return _json_response({"error": f"Internal: {type(error).__name__}: {error}"}, 500)

    @flask_app.route("/", defaults={"path": ""}, methods=methods)
    @flask_app.route("/<path:path>", methods=methods)
    def _dispatch(path: str) -> flask.Response:
        path = flask.request.path
        method = flask.request.method
        if path == METRICS_PATH and metrics is not None:
            _require_method(method, "GET")
            body, content_type = metrics.exposition()
            return flask.Response(body, status=200, content_type=content_type)
        match = _PREDICT_PATH.fullmatch(path)
        if match:
            _require_method(method, "POST")
            model_name, version, verb = match.groups()
            body = flask.request.get_data(cache=False)
            with manager.acquire(model_name, version) as model:
                if verb.lower() != "predict":
                    raise RequestError(f"Unimplemented: this server supports :predict only, "
                                       f"not :{verb}", 501)
                payload, flask.g.batch_size = model.predict_json(body, limits, run)
            return _json_response(payload)
        match = _METADATA_PATH.fullmatch(path)
        if match:
            _require_method(method, "GET")
            model_name, version = match.groups()
            with manager.acquire(model_name, version) as model:
                return _json_response(model.metadata_json())
        match = _STATUS_PATH.fullmatch(path)
        if match:
            _require_method(method, "GET")
            model_name, version = match.groups()
            if not model_name:
                raise RequestError("Missing model name in request.")
            return _json_response(manager.status_json(model_name, version))
        raise RequestError(f"Malformed request: {_log_safe(method, 20)} {_log_safe(path)} "
                           "(no such endpoint)", 404)

    return flask_app


# ----------------------------------------------------------------------------------------
# TF Serving's gRPC API (tensorflow-serving-api's protos and stubs).


def _grpc_code(http_status: int) -> Any:
    import grpc

    return getattr(grpc.StatusCode, STATUS_CODES.get(http_status, "INTERNAL"))


def create_grpc_server(manager: ModelManager, limits: Limits, run: Runner,
                       metrics: Metrics | None, host: str, port: int, threads: int,
                       max_request_bytes: int,
                       log_request: Callable[..., None] = absl_logging.info
                       ) -> tuple[Any, int]:
    """TF Serving's PredictionService (Predict, GetModelMetadata) and ModelService
    (GetModelStatus) on host:port; returns (grpc server, bound port), not yet started.
    `log_request` logs each request's line, as in `create_app`.

    Errors carry TF Serving's status codes: INVALID_ARGUMENT for bad requests, NOT_FOUND
    for an unknown model or version, UNAVAILABLE for a full batch queue, INTERNAL for a
    model failure; the other methods answer UNIMPLEMENTED.
    """
    from concurrent import futures

    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import (get_model_metadata_pb2, get_model_status_pb2,
                                         model_service_pb2_grpc, predict_pb2,
                                         prediction_service_pb2_grpc)

    def handle(method: str, context: Any, answer: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        status, message = 200, ""
        try:
            return answer()
        except RequestError as e:
            status, message = e.status, str(e)
        except Exception as e:  # noqa: BLE001 - any failure is INTERNAL, not a crash.
            absl_logging.error("internal error:\n%s", traceback.format_exc())
            status, message = 500, f"Internal: {type(e).__name__}: {_first_line(str(e))}"
        finally:
            elapsed = time.perf_counter() - started
            code = STATUS_CODES.get(status, "INTERNAL")
            log_request("%s grpc %s %s %.1fms", _log_safe(context.peer(), 60), method,
                        code, elapsed * 1e3)
            if metrics is not None:
                metrics.observe("grpc", method, code, elapsed)
        context.abort(_grpc_code(status), message)

    def version_of(model_spec: Any) -> str | None:
        if model_spec.version_label:
            raise RequestError("version labels are not supported by this server; use "
                               "model_spec.version")
        return str(model_spec.version.value) if model_spec.HasField("version") else None

    class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC's name
            return handle("predict", context, lambda: self._predict(request))

        def _predict(self, request: Any) -> Any:
            with manager.acquire(request.model_spec.name,
                                 version_of(request.model_spec)) as model:
                signature_name = model.signature(request.model_spec.signature_name)
                specs = model.input_specs(signature_name)
                _check_input_names(dict(request.inputs), sorted(specs), "inputs")
                inputs = {}
                for name, tensor in request.inputs.items():
                    spec = specs[name]
                    if tensor.dtype != spec.dtype.as_datatype_enum:
                        raise RequestError(f"input '{name}' expects {spec.dtype.name}, got "
                                           f"{tf.dtypes.as_dtype(tensor.dtype).name}")
                    try:
                        array = tf.make_ndarray(tensor)
                    except Exception as e:  # noqa: BLE001 - a malformed TensorProto.
                        raise RequestError(f"input '{name}': {_first_line(str(e))}") from e
                    if not spec.shape.is_compatible_with(array.shape):
                        raise RequestError(f"input '{name}' has shape {list(array.shape)}, "
                                           f"but the signature expects {spec.shape}")
                    inputs[name] = array
                prepared = model.prepare(signature_name, inputs, limits)
                outputs = run(model, prepared)
                wanted = list(request.output_filter) or list(outputs)
                unknown = [name for name in wanted if name not in outputs]
                if unknown:
                    raise RequestError(f"output_filter names unknown outputs {unknown}")
                response = predict_pb2.PredictResponse()
                response.model_spec.name = model.name
                response.model_spec.version.value = model.version
                response.model_spec.signature_name = signature_name
                for name in wanted:
                    response.outputs[name].CopyFrom(tensor_proto(outputs[name]))
                return response

        def GetModelMetadata(self, request: Any, context: Any) -> Any:  # noqa: N802
            return handle("metadata", context, lambda: self._metadata(request))

        def _metadata(self, request: Any) -> Any:
            fields = list(request.metadata_field)
            if fields != ["signature_def"]:
                raise RequestError(f"Metadata field(s) {fields} not supported: request "
                                   "['signature_def']")
            with manager.acquire(request.model_spec.name,
                                 version_of(request.model_spec)) as model:
                response = get_model_metadata_pb2.GetModelMetadataResponse()
                response.model_spec.name = model.name
                response.model_spec.version.value = model.version
                signature_defs = get_model_metadata_pb2.SignatureDefMap()
                for name, signature_def in model.signature_defs.items():
                    signature_defs.signature_def[name].CopyFrom(signature_def)
                response.metadata["signature_def"].Pack(signature_defs)
                return response

    class ModelService(model_service_pb2_grpc.ModelServiceServicer):
        def GetModelStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
            return handle("status", context, lambda: self._status(request))

        def _status(self, request: Any) -> Any:
            spec = request.model_spec
            status = manager.status_json(spec.name, version_of(spec))
            response = get_model_status_pb2.GetModelStatusResponse()
            for entry in status["model_version_status"]:
                version = response.model_version_status.add()
                version.version = int(entry["version"])
                version.state = get_model_status_pb2.ModelVersionStatus.State.Value(
                    entry["state"])
            return response

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="grpc"),
        options=[("grpc.max_receive_message_length", max_request_bytes),
                 ("grpc.so_reuseport", 0)])
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionService(), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(), server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    bound_port = server.add_insecure_port(address)
    if not bound_port:
        raise OSError(f"cannot bind gRPC port {address}")
    return server, bound_port


def _require_method(method: str, allowed: str) -> None:
    if method != allowed and not (method == "HEAD" and allowed == "GET"):
        raise http_errors.MethodNotAllowed(
            valid_methods=[allowed],
            description=f"Malformed request: {method} is not allowed here, use {allowed}")


class _InFlightCounter:
    """WSGI middleware counting requests in progress, so shutdown can wait for them."""

    def __init__(self, wsgi_app: Callable[..., Iterable[bytes]]) -> None:
        self._wsgi_app = wsgi_app
        self._count = 0
        self._idle = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        with self._idle:
            self._count += 1
        try:
            return self._wsgi_app(environ, start_response)
        finally:
            with self._idle:
                self._count -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._count == 0, timeout=timeout_s)


def _json_error_task_class() -> type:
    """waitress's ErrorTask answering {"error": ...} as JSON, like the app's own errors."""
    from waitress import task as waitress_task

    class JsonErrorTask(waitress_task.ErrorTask):
        def execute(self) -> None:
            error = self.request.error
            message = f"{error.reason}: {error.body}"
            if error.code == 413:
                message = ("Request body is larger than --max_request_bytes="
                           f"{self.channel.server.adj.max_request_body_size - 1}")
            body = json.dumps({"error": message}).encode("utf-8")
            self.status = f"{error.code} {error.reason}"
            self.response_headers.extend([("Content-Type", "application/json"),
                                          ("Connection", "close")])
            self.set_close_on_finish()
            self.channel.linger_on_close = True
            self.content_length = len(body)
            self.write(body)

    return JsonErrorTask


# After an error answer (e.g. 413 mid-body), the rest of the client's body is read and
# dropped for at most this long before the socket closes: closing with unread data sends a
# TCP reset, which makes the client lose the answer (Apache's "lingering close").
LINGER_AFTER_ERROR_S = 2.0


def _lingering_channel_class(base: type) -> type:
    """A waitress channel that half-closes after an error answer, then drains its input."""

    class LingeringChannel(base):
        linger_on_close = False
        _linger_until: float | None = None

        def handle_close(self) -> None:
            if self.linger_on_close and self._linger_until is None and self.connected:
                try:
                    self.socket.shutdown(socket.SHUT_WR)  # the answer is sent; FIN follows
                except OSError:
                    return super().handle_close()
                self._linger_until = time.monotonic() + LINGER_AFTER_ERROR_S
                self.will_close = self.close_when_flushed = False
                return None
            return super().handle_close()

        def readable(self) -> bool:
            return self._linger_until is not None or super().readable()

        def writable(self) -> bool:
            if self._linger_until is not None:  # only to close when maintenance says so
                return bool(self.will_close)
            return super().writable()

        def handle_read(self) -> None:
            if self._linger_until is None:
                return super().handle_read()
            try:
                data = self.socket.recv(1 << 16)
            except OSError:
                data = b""
            if not data or time.monotonic() > self._linger_until:
                super().handle_close()
            return None

    return LingeringChannel


def serve(flask_app: flask.Flask, host: str, port: int, shutdown_timeout_s: float,
          on_ready: Callable[[int], None] | None = None, *, threads: int = 16,
          max_request_bytes: int = 1 << 20, read_timeout_s: float = 30.0,
          stop: threading.Event | None = None, grpc_server: Any = None,
          on_stop: Callable[[], None] | None = None) -> None:
    """Serves flask_app with waitress until SIGINT or SIGTERM (or `stop` is set).

    waitress reads each request fully (Content-Length or chunked, at most
    max_request_bytes) before a worker thread runs the app, keeps HTTP/1.1 connections
    alive, and closes a connection silent for read_timeout_s (a stalled body included).
    On a signal it stops accepting, waits up to shutdown_timeout_s for requests in
    progress, then closes every connection.
    """
    import waitress
    from waitress import channel as waitress_channel
    from waitress import wasyncore

    counter = _InFlightCounter(flask_app.wsgi_app)
    flask_app.wsgi_app = counter  # type: ignore[method-assign]
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "Task queue depth" notes.
    server = waitress.create_server(
        flask_app, host=host, port=port, threads=threads, ident="tetra-serving",
        # waitress rejects bodies of max_request_body_size bytes or more: one over ours.
        max_request_body_size=max_request_bytes + 1, channel_timeout=read_timeout_s,
        cleanup_interval=max(0.5, min(30.0, read_timeout_s / 4)), connection_limit=1000,
        clear_untrusted_proxy_headers=True)

    class JsonErrorChannel(_lingering_channel_class(waitress_channel.HTTPChannel)):
        error_task_class = _json_error_task_class()

    server.channel_class = JsonErrorChannel
    stop = stop or threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}
    thread = threading.Thread(target=server.run, name="http", daemon=True)
    thread.start()
    if grpc_server is not None:
        grpc_server.start()
    if on_ready:
        on_ready(int(server.effective_port))
    try:
        while not stop.wait(0.5) and thread.is_alive():
            pass
    finally:
        absl_logging.info("shutting down: no new connections; waiting up to %.0f s for "
                          "requests in progress", shutdown_timeout_s)
        # Everything that touches waitress's sockets runs on its event loop thread.
        server.trigger.pull_trigger(lambda: wasyncore.dispatcher.close(server))
        grpc_stopped = grpc_server.stop(shutdown_timeout_s) if grpc_server else None
        if on_stop:
            on_stop()
        if not counter.wait_idle(shutdown_timeout_s):
            absl_logging.warning("requests still in progress at shutdown were abandoned")
        time.sleep(0.2)  # Let the loop send the last answers.
        server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
        thread.join(timeout=5)
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)
        if grpc_stopped is not None:
            grpc_stopped.wait(shutdown_timeout_s)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# ----------------------------------------------------------------------------------------
# Command line.


def _define_flags() -> None:
    flags.DEFINE_string("model_base_path", None,
                        "Directory with numbered SavedModel versions (BASE/1/saved_model.pb); "
                        "the highest version is served.")
    flags.DEFINE_string("model_name", "tetra", "Model name in the request paths.")
    flags.DEFINE_integer("rest_api_port", 8501, "HTTP port (0: pick a free one, logged).",
                         lower_bound=0, upper_bound=65535)
    flags.DEFINE_string("rest_api_host", "127.0.0.1",
                        "Address to bind (REST and gRPC); the default accepts local "
                        "connections only.")
    flags.DEFINE_integer("port", 8500, "gRPC port for TF Serving's PredictionService and "
                         "ModelService (0: pick a free one, logged).", lower_bound=0,
                         upper_bound=65535)
    flags.DEFINE_integer("max_request_bytes", 1 << 20,
                         "Larger request bodies get HTTP 413.", lower_bound=1)
    flags.DEFINE_integer("max_batch_size", 64, "Most instances (or batch rows) per request.",
                         lower_bound=1)
    flags.DEFINE_integer("max_words_per_sentence", 1000,
                         "Longer sentences get HTTP 400 before the model runs.", lower_bound=1)
    flags.DEFINE_integer("max_words_per_request", 16384,
                         "Most words in all sentences of one request.", lower_bound=1)
    flags.DEFINE_list("sentence_inputs", ["sentences"],
                      "String inputs checked as sentences (valid UTF-8, 1 to "
                      "--max_words_per_sentence space-separated words).")
    flags.DEFINE_list("word_inputs", ["words"],
                      "String inputs [batch, width] checked as pre-split sentences (width at "
                      f"most --max_words_per_sentence; with a '{NUM_WORDS_INPUT}' input, its "
                      "first num_words entries per row are non-empty words without spaces).")
    flags.DEFINE_integer("max_pieces_per_request", 32768,
                         "Most WordPiece pieces in one request (a word counts at most "
                         "tetra_tf.tokenization.MAX_PIECES_PER_WORD), counted with the "
                         "export's own vocabulary before the model runs; at most the graph's "
                         "MAX_PIECES_PER_CALL (32768).", lower_bound=1, upper_bound=32768)
    flags.DEFINE_float("request_read_timeout_s", 30.0,
                       "A connection silent this long (a stalled request body, or an idle "
                       "keep-alive connection) is closed.", lower_bound=0.1)
    flags.DEFINE_integer("rest_api_num_threads", 64,
                         "Threads answering HTTP requests (each waits for its model call; "
                         "with batching, this bounds how many requests can be merged).",
                         lower_bound=1)
    flags.DEFINE_float("file_system_poll_wait_seconds", 1.0,
                       "Check --model_base_path this often for a new highest version, load "
                       "it and switch to it without a restart (TF Serving's flag); 0 or "
                       "less: never.")
    flags.DEFINE_bool("enable_batching", False,
                      "Merge concurrent predict requests into one model call (TF Serving's "
                      "flag), with --batching_parameters_file.")
    flags.DEFINE_string("batching_parameters_file", None,
                        "TF Serving's BatchingParameters in text format (max_batch_size, "
                        "batch_timeout_micros, max_enqueued_batches, num_batch_threads, "
                        "allowed_batch_sizes); TF Serving's defaults without it. See "
                        "serving/batching_parameters.txt.")
    flags.DEFINE_integer("max_concurrent_predictions", 1,
                         "Model calls run at once (others wait); 1 serializes them.",
                         lower_bound=1)
    flags.DEFINE_integer("tensorflow_intra_op_parallelism", 0,
                         "Threads that one TensorFlow op may use (TF Serving's flag); 0: "
                         "TensorFlow's default (the CPU count). With num_batch_threads 2, 1 "
                         "is faster on small CPUs: see serving/batching_parameters.txt.",
                         lower_bound=0)
    flags.DEFINE_integer("tensorflow_inter_op_parallelism", 0,
                         "Threads running independent TensorFlow ops (TF Serving's flag); "
                         "0: TensorFlow's default.", lower_bound=0)
    flags.DEFINE_float("shutdown_timeout_s", 30.0,
                       "On SIGINT/SIGTERM, wait this long for requests in progress.",
                       lower_bound=0.0)


def configure_tensorflow_threads(intra_op: int, inter_op: int) -> str:
    """Sets TensorFlow's thread pools before any model loads (TensorFlow refuses after).

    Args:
      intra_op: threads one op may use; 0 keeps TensorFlow's default.
      inter_op: threads running independent ops; 0 keeps TensorFlow's default.

    Returns:
      What TensorFlow now reports, for the log, e.g. "intra-op 1, inter-op default".
    """
    import tensorflow as tf

    if intra_op:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op)
    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    return ", ".join(f"{name} {count or 'default'}" for name, count in (
        ("intra-op", tf.config.threading.get_intra_op_parallelism_threads()),
        ("inter-op", tf.config.threading.get_inter_op_parallelism_threads())))


def _check_port_free(host: str, port: int) -> None:
    """Fails fast (before the slow model load) when host:port cannot be bound.

    Raises:
      OSError: the address is taken or cannot be bound.
    """
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # As the server does.
        sock.bind((host, port))


def _error(message: str) -> None:
    print(f"{PROGRAM}: error: {message}", file=sys.stderr)


def _parse_flags(argv: list[str]) -> list[str]:
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        _error(f"{str(e).splitlines()[0] if str(e) else 'bad flags'} (see --help)")
        sys.exit(EXIT_USAGE)
    except SystemExit as e:
        # absl exits 1 after printing --help; asking for help is not a failure.
        help_flags = ("--help", "-help", "-h", "--helpshort", "--helpfull", "-?")
        if e.code == 1 and any(a.split("=")[0] in help_flags for a in argv[1:]):
            sys.exit(EXIT_OK)
        raise


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        _error(f"unexpected arguments: {' '.join(argv[1:])} (flags need --name=value)")
        return EXIT_USAGE
    flag_values = flags.FLAGS
    try:
        if not flag_values.model_base_path:
            raise UsageError("--model_base_path is required")
        version, export_dir = find_latest_version(flag_values.model_base_path)
    except UsageError as e:
        _error(str(e))
        return EXIT_USAGE
    batching_params = None
    if flag_values.enable_batching:
        try:
            batching_params = (batching.read_batching_parameters(
                flag_values.batching_parameters_file)
                if flag_values.batching_parameters_file else batching.BatchingParameters())
        except batching.BatchingParametersError as e:
            _error(f"--batching_parameters_file: {e}")
            return EXIT_USAGE
    elif flag_values.batching_parameters_file:
        _error("--batching_parameters_file needs --enable_batching")
        return EXIT_USAGE
    try:
        for port in (flag_values.rest_api_port, flag_values.port):
            _check_port_free(flag_values.rest_api_host, port)
    except OSError as e:
        _error(f"cannot serve on {flag_values.rest_api_host}:{port}: {e.strerror or e}")
        return EXIT_FAILURE
    absl_logging.info("loading model %r version %d from %s", flag_values.model_name, version,
                      export_dir)
    absl_logging.info("TensorFlow threads: %s", configure_tensorflow_threads(
        flag_values.tensorflow_intra_op_parallelism,
        flag_values.tensorflow_inter_op_parallelism))
    metrics = Metrics()

    # With batching, each batch thread runs a model call: let that many run at once.
    model_slots = (batching_params.num_batch_threads if batching_params is not None
                   else flag_values.max_concurrent_predictions)

    def load(new_version: int, new_export_dir: str) -> ServedModel:
        return ServedModel(flag_values.model_name, new_version, new_export_dir, model_slots,
                           metrics.model_call_seconds.observe)

    try:
        model = load(version, export_dir)
    except Exception as e:  # noqa: BLE001 - one line, not a traceback
        _error(f"cannot load {export_dir}: {type(e).__name__}: {_first_line(str(e))}")
        return EXIT_FAILURE
    limits = Limits(max_batch_size=flag_values.max_batch_size,
                    max_words_per_sentence=flag_values.max_words_per_sentence,
                    max_words_per_request=flag_values.max_words_per_request,
                    sentence_inputs=tuple(flag_values.sentence_inputs),
                    word_inputs=tuple(flag_values.word_inputs),
                    max_pieces_per_request=flag_values.max_pieces_per_request)
    metrics.model_version.set(model.version)
    runner: DirectRunner | BatchingRunner
    if batching_params is not None:
        runner = BatchingRunner(batching_params, limits, metrics)
        absl_logging.info("batching: %s", batching_params)
    else:
        runner = DirectRunner(metrics)

    manager = ModelManager(model, load, on_unload=runner.unload,
                           on_switch=lambda m: metrics.model_version.set(m.version))
    if flag_values.file_system_poll_wait_seconds > 0:
        manager.watch(flag_values.model_base_path, flag_values.file_system_poll_wait_seconds)
    access_log = AccessLog()
    try:
        return _serve_model(flag_values, model, manager, limits, runner, metrics, access_log)
    finally:
        access_log.stop()


def _serve_model(flag_values: Any, model: ServedModel, manager: ModelManager, limits: Limits,
                 runner: Runner, metrics: Metrics, access_log: AccessLog) -> int:
    """Serves REST and gRPC until a signal; returns the exit code."""
    flask_app = create_app(manager, limits, flag_values.max_request_bytes, runner, metrics,
                           access_log.info)
    try:
        grpc_server, grpc_port = create_grpc_server(
            manager, limits, runner, metrics, flag_values.rest_api_host, flag_values.port,
            flag_values.rest_api_num_threads, flag_values.max_request_bytes, access_log.info)
    except (OSError, RuntimeError) as e:
        _error(f"cannot serve gRPC on {flag_values.rest_api_host}:{flag_values.port}: {e}")
        return EXIT_FAILURE

    def on_ready(port: int) -> None:
        absl_logging.info("serving model %r version %d (signatures: %s) at http://%s:%d/v1/"
                          "models/%s and gRPC %s:%d", model.name, model.version,
                          ", ".join(model.signature_names), flag_values.rest_api_host, port,
                          model.name, flag_values.rest_api_host, grpc_port)

    try:
        serve(flask_app, flag_values.rest_api_host, flag_values.rest_api_port,
              flag_values.shutdown_timeout_s, on_ready,
              threads=flag_values.rest_api_num_threads,
              max_request_bytes=flag_values.max_request_bytes,
              read_timeout_s=flag_values.request_read_timeout_s, grpc_server=grpc_server,
              on_stop=manager.stop)
    except OSError as e:
        _error(f"cannot serve on {flag_values.rest_api_host}:{flag_values.rest_api_port}: {e}")
        return EXIT_FAILURE
    return EXIT_OK


def _exit_now(code: Any) -> None:
    """Exits after flushing, skipping the interpreter's teardown: TensorFlow's and gRPC's
    native threads make that take ~10 s after a clean shutdown."""
    if isinstance(code, str):
        print(code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(code if isinstance(code, int) else EXIT_OK if code is None else EXIT_FAILURE)


if __name__ == "__main__":
    _define_flags()
    try:
        app.run(main, flags_parser=_parse_flags)
    except SystemExit as e:
        _exit_now(e.code)
