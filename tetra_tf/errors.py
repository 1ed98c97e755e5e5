"""The errors tetra-tf's library raises, apart from any command line.

A `TetraError` is a problem the caller can fix (a path that is not an export, bad options,
unreadable input); the command-line layer (`tetra_tf.cli`) alone turns it into one line and
exit code 2. `ModelError` is the model itself failing, which no input can fix. A refused
sentence is a `tetra_tf.sentences.SentenceError` and fails alone.
"""

from __future__ import annotations


class TetraError(Exception):
    """A problem the caller can fix: a bad path, option or input (the CLI's exit code 2)."""


class ExportError(TetraError):
    """A path that is not a usable tetra-tf export (no SavedModel, a foreign one, bad files)."""


class ModelDirError(TetraError):
    """A path that is not a usable training model directory or checkpoint."""


class InputError(TetraError):
    """A run's input or options cannot be used (a missing file, a bad value)."""


class ModelError(RuntimeError):
    """The model itself failed (not a sentence's fault): every way in stops on it."""
