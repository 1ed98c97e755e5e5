"""Codecs: TF Serving's JSON and TensorProtos to input arrays, output arrays back.

Inputs are checked against the limits by their shape (a JSON list's nesting, a
TensorProto's declared dims) before any array is built (`admission.check_declared_shape`).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import numpy as np

from tetra_tf.serving.admission import MAX_INPUT_RANK, ModelLimits, check_declared_shape
from tetra_tf.serving.errors import RequestError, first_line


MAX_JSON_INTEGER_DIGITS = 20  # int64 and uint64 fit; longer integers are rejected, not parsed.


def parse_json_object(body: bytes) -> dict[str, Any]:
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
        raise RequestError(f"JSON Parse error: {first_line(str(e))[:200]}") from e
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


def request_inputs(request: dict[str, Any], specs: dict[str, Any],
                   limits: ModelLimits) -> tuple[dict[str, np.ndarray], bool]:
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
                check_input_names(instance, names, f"instance {index}")
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
            check_input_names(value, names, "'inputs'")
            values = value
        elif len(names) == 1:
            values = {names[0]: value}
        else:
            raise RequestError(f"'inputs' must be an object with the named inputs {names}")
    arrays = {name: _json_to_array(values[name], specs[name], name, limits)
              for name in names}
    return arrays, has_instances


def check_input_names(value: dict[str, Any], names: list[str], where: str) -> None:
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


def _json_shape(value: Any) -> list[int]:
    """The shape a JSON input declares by its nesting (along its first elements)."""
    shape: list[int] = []
    while isinstance(value, list):
        if len(shape) >= MAX_INPUT_RANK:
            raise RequestError(f"input nested deeper than {MAX_INPUT_RANK} levels")
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _json_to_array(value: Any, spec: Any, name: str, limits: ModelLimits) -> np.ndarray:
    """Converts a JSON input to an array of spec's dtype and a shape compatible with spec,
    its shape checked against the limits first."""
    check_declared_shape(name, _json_shape(value), limits)
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


# ----------------------------------------------------------------------------------------
# Response encoding.


# Output dtypes whose TensorProto is built directly (tensor_content: the array's bytes):
# tf.make_tensor_proto takes 5x as long, 0.19 ms per one-sentence answer of the parser.
_TENSOR_CONTENT_DTYPES = {np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64")}


def tensor_proto_to_array(name: str, tensor: Any, spec: Any, limits: ModelLimits
                          ) -> np.ndarray:
    """A request's TensorProto as an array of spec's dtype and a shape compatible with spec.

    Its declared shape is checked against the limits before the array is built: a small
    message may declare 10^8 rows of one repeated value, which tf.make_ndarray would expand.
    """
    import tensorflow as tf

    if tensor.dtype != spec.dtype.as_datatype_enum:
        try:
            given = tf.dtypes.as_dtype(tensor.dtype).name
        except TypeError:
            given = f"dtype {tensor.dtype}"
        raise RequestError(f"input '{name}' expects {spec.dtype.name}, got {given}")
    if tensor.tensor_shape.unknown_rank:
        raise RequestError(f"input '{name}' has an unknown rank; give its shape")
    check_declared_shape(name, [dim.size for dim in tensor.tensor_shape.dim], limits)
    try:
        array = tf.make_ndarray(tensor)
    except Exception as e:  # noqa: BLE001 - a malformed TensorProto.
        raise RequestError(f"input '{name}': {first_line(str(e))}") from e
    if not spec.shape.is_compatible_with(array.shape):
        raise RequestError(f"input '{name}' has shape {list(array.shape)}, but the signature "
                           f"expects {spec.shape}")
    return array


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


def array_json(name: str, array: np.ndarray) -> Any:
    """An output array as nested JSON lists, strings as UTF-8 text (b64 for *_bytes)."""
    if array.dtype == object or array.dtype.kind == "S":
        items = array.reshape(-1).tolist()  # Python bytes: faster to loop over than numpy's
        if name.endswith("_bytes"):
            flat = [{"b64": base64.b64encode(b).decode("ascii")} for b in items]
        else:
            flat = [b.decode("utf-8", errors="replace") for b in items]
    elif array.dtype == np.float32:
        flat = [_shortest_float(x) for x in array.reshape(-1)]
    else:
        return array.tolist()
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


def rows_json(outputs: dict[str, np.ndarray], batch_size: int) -> list[Any]:
    """Row format: one prediction per instance (a bare value when there is one output)."""
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != batch_size:
            raise RequestError(f"Internal: output '{name}' has shape {list(value.shape)}, not "
                               f"batch-major with batch size {batch_size}; use the columnar "
                               "'inputs' format", 500)
    columns = {name: array_json(name, value) for name, value in outputs.items()}
    if len(columns) == 1:
        return next(iter(columns.values()))
    return [{name: column[i] for name, column in columns.items()} for i in range(batch_size)]
