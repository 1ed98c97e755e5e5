"""The optional parts of tetra-tf (pip extras) and one clear line when one is missing.

``pip install tetra-tf`` installs the runtime: parsing an export from Python or the command
line. Training and exporting need ``[train]`` (tf-models-official for BERT, tf-keras,
safetensors); each integration has its own extra (setup.py). A program that needs an extra
checks for it before importing it, so that a user without it reads one line naming the
``pip install`` to run instead of a traceback.
"""

from __future__ import annotations

import importlib.util
import sys

from tetra_tf.errors import TetraError

# The top-level modules each extra brings, as `import` names them.
MODULES = {
    "train": ("tf_keras", "official", "safetensors", "tensorflow_serving"),
    "serving": ("waitress", "grpc", "tensorflow_serving", "prometheus_client"),
    "beam": ("apache_beam",),
    "spark": ("pyspark", "pyarrow"),
    "spacy": ("spacy",),
}


class MissingExtraError(TetraError, ImportError):
    """A part of tetra-tf was used without the pip extra that brings its packages."""


def missing(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here (found without importing them)."""
    return [name for name in MODULES[extra] if importlib.util.find_spec(name) is None]


def require(extra: str, program: str | None = None) -> None:
    """Checks that the packages of `extra` are installed.

    Args:
      extra: a key of MODULES.
      program: set when called by a program's ``__main__`` (e.g. "python -m
        tetra_tf.train"): a missing extra then prints one line and exits with code 2.

    Raises:
      MissingExtraError: naming the missing modules and the pip command (library use).
    """
    absent = missing(extra)
    if not absent:
        return
    message = (f"{program or 'this'} needs tetra-tf's [{extra}] extra (not installed: "
               f"{', '.join(absent)}): pip install 'tetra-tf[{extra}]'")
    if program is not None:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
    raise MissingExtraError(message)
