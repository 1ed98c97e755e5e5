"""The errors tetra-tf's library raises, apart from any command line.

A `TetraError` is a problem the caller can fix (a path that is not an export, bad options,
unreadable input), said in the library's words (its parameters' names, never a program's
flags); the command-line layer (`tetra_tf.cli`) alone turns it into one line and exit code
2, naming the program's flags where an `InputError` names their parameters. `ModelError` is
the model itself failing, which no input can fix. A refused sentence is a
`tetra_tf.contract.sentences.SentenceError` and fails alone.
"""

from __future__ import annotations

from typing import Sequence


class TetraError(Exception):
    """A problem the caller can fix: a bad path, option or input (the CLI's exit code 2)."""


class ExportError(TetraError):
    """A path that is not a usable tetra-tf export (no SavedModel, a foreign one, bad files)."""


class ModelDirError(TetraError):
    """A path that is not a usable training model directory or checkpoint."""


class InputError(TetraError):
    """A run's input or options cannot be used (a missing file, a bad value).

    Attributes:
      parameters: the parameters of the call that the message names, as written there
        (``warmup_steps=-1: must be >= 0``): a program says its flags instead
        (``--warmup_steps=-1``).
    """

    def __init__(self, message: str = "", parameters: Sequence[str] = ()):
        super().__init__(message)
        self.parameters = tuple(parameters)


class ModelError(RuntimeError):
    """The model itself failed (not a sentence's fault): every way in stops on it."""
