"""Parsers shipped inside the package: found by name, with no network and no training extra.

A packaged model is an export (tetra_tf/export.py) stored in `tetra_tf/models/NAME/` with its
weights in float16, half the bytes of float32. On first use its SavedModel is written again
with the weights cast back to float32, under

  $TETRA_TF_HOME/models/NAME/VERSION  (default: ~/.cache/tetra_tf/models/NAME/VERSION)

which is TensorFlow Serving's layout (a base path, then a version): every way in then loads
an ordinary export, as fast as the float32 one it was packed from. Each file is checked
against the SHA-256 in the model's manifest first, so missing or damaged files are refused
with one line instead of a wrong parser.

`tetra_tf.Parser()` parses with DEFAULT_MODEL; a model argument of every way in takes a
packaged model's name or an export's path (`resolve`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from tetra_tf import default_encoder
from tetra_tf.errors import ExportError

DEFAULT_MODEL = "en_ptb_sample_sm"
PACKAGED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
MANIFEST_FILE = "manifest.json"
# The packed weights' checkpoint; not `variables/`, so that nothing mistakes the packed
# folder for a SavedModel.
PACKED_WEIGHTS = os.path.join("weights_float16", "variables")
_EXPORT_WEIGHTS = os.path.join("variables", "variables")
_COMPLETE_MARK = MANIFEST_FILE  # written last into a materialized export


def names(packaged_dir: str | None = None) -> list[str]:
    """The packaged models' names, sorted."""
    packaged_dir = packaged_dir or PACKAGED_DIR
    if not os.path.isdir(packaged_dir):
        return []
    return sorted(name for name in os.listdir(packaged_dir)
                  if os.path.isfile(os.path.join(packaged_dir, name, MANIFEST_FILE)))


def is_name(model: str) -> bool:
    """Whether a model argument is a packaged model's name: a bare word that is not a path
    that exists (so `models/tetra/1`, `./NAME` and gs://... are paths)."""
    return bool(model) and "/" not in model and os.sep not in model and not os.path.exists(model)


def _damaged(name: str, why: str) -> ExportError:
    return ExportError(f"the packaged model {name} is damaged: {why} (reinstall tetra-tf, or "
                       "pass an export's path)")


def manifest(name: str = DEFAULT_MODEL, packaged_dir: str | None = None) -> dict[str, Any]:
    """A packaged model's manifest: version, files and their SHA-256, the card's summary.

    Raises:
      ExportError: no packaged model of that name, or an unreadable manifest.
    """
    packaged_dir = packaged_dir or PACKAGED_DIR
    path = os.path.join(packaged_dir, name, MANIFEST_FILE)
    if not os.path.isfile(path):
        shipped = ", ".join(names(packaged_dir)) or "none"
        raise ExportError(f"no packaged model named {name} (packaged: {shipped}); pass an "
                          "export's path, or reinstall tetra-tf if it should be there")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise _damaged(name, f"{MANIFEST_FILE} is unreadable ({e})") from None
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict) or (
            "version" not in record):
        raise _damaged(name, f"{MANIFEST_FILE} has no version or files")
    return record


def verify(name: str = DEFAULT_MODEL, packaged_dir: str | None = None) -> dict[str, Any]:
    """Checks every file of a packaged model against its manifest; returns the manifest.

    Raises:
      ExportError: naming the first file that is missing or not what was packed.
    """
    packaged_dir = packaged_dir or PACKAGED_DIR
    record = manifest(name, packaged_dir)
    root = os.path.join(packaged_dir, name)
    for relative, digest in sorted(record["files"].items()):
        path = os.path.join(root, relative)
        if not os.path.isfile(path):
            raise _damaged(name, f"{relative} is missing")
        if default_encoder.sha256(path) != digest:
            raise _damaged(name, f"{relative} does not match its SHA-256")
    return record


def _convert_weights(source_prefix: str, target_prefix: str, from_dtype, to_dtype) -> None:
    """Writes a checkpoint's tensors again, those of `from_dtype` cast to `to_dtype`."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    reader = tf.train.load_checkpoint(source_prefix)
    dtypes = reader.get_variable_to_dtype_map()
    keys = sorted(dtypes)
    tensors = [tf.cast(reader.get_tensor(key), to_dtype) if dtypes[key] == from_dtype
               else tf.constant(reader.get_tensor(key)) for key in keys]
    os.makedirs(os.path.dirname(target_prefix), exist_ok=True)
    tf.raw_ops.SaveV2(prefix=target_prefix, tensor_names=keys,
                      shape_and_slices=[""] * len(keys), tensors=tensors)


def base_path(name: str = DEFAULT_MODEL) -> str:
    """Where a packaged model's exports are written: a TF Serving base path (VERSION/ in it)."""
    return default_encoder.cache_dir(os.path.join("models", name))


def export_dir(name: str = DEFAULT_MODEL, packaged_dir: str | None = None) -> str:
    """The packaged model's SavedModel (float32 weights), written on first use.

    Returns:
      base_path(name)/VERSION, or a temporary BASE/VERSION when the cache cannot be
      written; either way its parent is a TF Serving base path (`serving_base_path`).

    Raises:
      ExportError: the model is not packaged, or its files are missing or damaged.
    """
    packaged_dir = packaged_dir or PACKAGED_DIR
    record = manifest(name, packaged_dir)
    target = os.path.join(base_path(name), str(record["version"]))
    if os.path.isfile(os.path.join(target, _COMPLETE_MARK)):
        return target
    verify(name, packaged_dir)
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=f".{record['version']}-", dir=os.path.dirname(target))
    except OSError:  # a read-only home: this process gets its own copy, in a base path
        scratch = os.path.join(tempfile.mkdtemp(prefix=f"tetra_tf-{name}-"),
                               str(record["version"]))
        target = None
    _write_export(os.path.join(packaged_dir, name), record, scratch)
    if target is None:
        return scratch
    try:
        os.rename(scratch, target)
    except OSError:  # another process wrote it first: theirs is the same
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def write_export(name: str, target: str, packaged_dir: str | None = None) -> None:
    """Writes a packaged model's float32 SavedModel into target, its files checked first.

    Raises:
      ExportError: the model is not packaged, or its files are missing or damaged.
    """
    packaged_dir = packaged_dir or PACKAGED_DIR
    record = verify(name, packaged_dir)
    _write_export(os.path.join(packaged_dir, name), record, target)


def _write_export(packed: str, record: dict[str, Any], target: str) -> None:
    """The SavedModel of a packed model: its files as they are, the weights as float32."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    weights_dir = os.path.dirname(PACKED_WEIGHTS)
    for relative in record["files"]:
        if relative.startswith(weights_dir + "/") or relative == MANIFEST_FILE:
            continue
        os.makedirs(os.path.dirname(os.path.join(target, relative)), exist_ok=True)
        shutil.copyfile(os.path.join(packed, relative), os.path.join(target, relative))
    _convert_weights(os.path.join(packed, PACKED_WEIGHTS), os.path.join(target, _EXPORT_WEIGHTS),
                     tf.float16, tf.float32)
    with open(os.path.join(target, _COMPLETE_MARK), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)


def resolve(model: str | None) -> str:
    """The export directory for a way in's model argument.

    Args:
      model: None or "" (the default packaged model), a packaged model's name, or an
        export's path (returned as given).

    Raises:
      ExportError: a packaged model whose files are missing or damaged.
    """
    if not model:
        return export_dir(DEFAULT_MODEL)
    if not is_name(model):
        return model
    if model not in names():
        raise ExportError(f"{model} is neither an export's path nor a packaged model's name "
                          f"(packaged: {', '.join(names()) or 'none'})")
    return export_dir(model)


def serving_base_path(model: str | None) -> str:
    """The TF Serving base path (BASE/VERSION/saved_model.pb) for a server's model argument.

    Args:
      model: None or "" (the default packaged model), a packaged model's name (its export
        written on first use), or a base path (returned as given).

    Raises:
      ExportError: a packaged model that is missing or damaged.
    """
    if model and not is_name(model):
        return model
    return os.path.dirname(resolve(model))


def pack(source_export: str, name: str, version: int | str, output_dir: str,
         extra_files: dict[str, str] | None = None) -> dict[str, Any]:
    """Packs an export as a packaged model: its files, the weights in float16, a manifest.

    Args:
      source_export: the float32 export to pack.
      name: the packaged model's name.
      version: its version (the materialized export's folder).
      output_dir: the packaged model's folder (e.g. tetra_tf/models/NAME), emptied first.
      extra_files: relative path → source path, copied in too (e.g. the model card).

    Returns:
      The manifest written.
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if os.path.isdir(output_dir):
        shutil.rmtree(output_dir)
    for root, _, files in os.walk(source_export):
        relative_root = os.path.relpath(root, source_export)
        if relative_root.split(os.sep)[0] == "variables":
            continue
        for file in files:
            target = os.path.normpath(os.path.join(output_dir, relative_root, file))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(os.path.join(root, file), target)
    _convert_weights(os.path.join(source_export, _EXPORT_WEIGHTS),
                     os.path.join(output_dir, PACKED_WEIGHTS), tf.float32, tf.float16)
    for relative, source in (extra_files or {}).items():
        os.makedirs(os.path.dirname(os.path.join(output_dir, relative)) or output_dir,
                    exist_ok=True)
        shutil.copyfile(source, os.path.join(output_dir, relative))
    files = {}
    for root, _, found in os.walk(output_dir):
        for file in found:
            path = os.path.join(root, file)
            relative = os.path.relpath(path, output_dir).replace(os.sep, "/")
            files[relative] = default_encoder.sha256(path)
    record = {"name": name, "version": str(version), "weights_dtype": "float16",
              "files": dict(sorted(files.items()))}
    with open(os.path.join(output_dir, MANIFEST_FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    return record
