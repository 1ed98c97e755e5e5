"""Old module paths that keep working for a release after their module moved (benepar's way).

The package searches this folder too (`tetra_tf.__path__`), so the shim `_moved/sentences.py`
answers ``import tetra_tf.sentences`` without a file at the package's top. Importing a shim
warns once (FutureWarning) and gives the new module itself, so its names, monkeypatching and
pickles behave the same. A program that moved its library (``python -m tetra_tf.train``)
forwards the library's names the same way.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings
from typing import Any, Callable

REMOVED_IN = "0.3"


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old path goes away in tetra-tf {REMOVED_IN}",
                  FutureWarning, stacklevel=4)


def alias(old: str, new: str) -> None:
    """Makes the module path `old` the module `new` (call from old's shim; warns once)."""
    _warn(old, new)
    sys.modules[old] = importlib.import_module(new)


def forward(program: str, library: types.ModuleType) -> Callable[[str], Any]:
    """A module `__getattr__` for a program whose library moved: its names, with a warning
    the first time."""
    warned = False

    def __getattr__(name: str) -> Any:  # noqa: N807
        nonlocal warned
        if name.startswith("__") or not hasattr(library, name):
            raise AttributeError(f"module {program!r} has no attribute {name!r}")
        if not warned:
            warned = True
            _warn(f"{program}.{name}", f"{library.__name__}.{name}")
        return getattr(library, name)

    return __getattr__
