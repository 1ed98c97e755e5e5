"""What an exported SavedModel directory holds, read without TensorFlow (for local paths):
every way in checks "is there a model here?" and reads the export's limits through this.

  saved_model.pb               the graph (tetra_tf/export.py)
  assets.extra/limits.json     the work bounds the graph enforces (max_pieces_per_call ...)
  assets.extra/model_card.json what the export is (tetra_tf/model_card.py)
"""

from __future__ import annotations

import json
import os

SAVED_MODEL_FILE = "saved_model.pb"
SAVED_MODEL_FILES = (SAVED_MODEL_FILE, "saved_model.pbtxt")  # binary, or text (TF Serving's)
LIMITS_FILE = os.path.join("assets.extra", "limits.json")


def _is_remote(path: str) -> bool:
    return "://" in path


def saved_model_file(export_dir: str) -> str | None:
    """The SavedModel's saved_model.pb (or .pbtxt) in a local export_dir, None if none."""
    for name in SAVED_MODEL_FILES:
        path = os.path.join(export_dir, name)
        if os.path.isfile(path):
            return path
    return None


def has_saved_model(export_dir: str) -> bool:
    """Whether export_dir holds a SavedModel: a local path without loading TensorFlow, or
    gs://... and the other file systems TensorFlow reads."""
    if not _is_remote(export_dir):
        return saved_model_file(export_dir) is not None
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return any(tf.io.gfile.exists(os.path.join(export_dir, name)) for name in SAVED_MODEL_FILES)


def no_saved_model_message(export_dir: str) -> str:
    """The one-line message for a directory without a SavedModel."""
    return (f"{export_dir} holds no SavedModel ({SAVED_MODEL_FILE}); export one with "
            "python -m tetra_tf.export")


def read_limits(export_dir: str) -> dict[str, int]:
    """The export's published work bounds (assets.extra/limits.json); {} if it has none.

    Raises:
      ValueError: if the file is there but is not a JSON object of integers.
    """
    path = os.path.join(export_dir, LIMITS_FILE)
    if _is_remote(export_dir):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        if not tf.io.gfile.exists(path):
            return {}
        with tf.io.gfile.GFile(path, "r") as f:
            text = f.read()
    else:
        if not os.path.isfile(path):
            return {}
        with open(path, encoding="utf-8") as f:
            text = f.read()
    try:
        limits = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None
    if not isinstance(limits, dict) or not all(
            isinstance(value, int) and not isinstance(value, bool) and value > 0
            for value in limits.values()):
        raise ValueError(f"{path}: expected a JSON object of positive integers")
    return limits
