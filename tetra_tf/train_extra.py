"""The [train] extra, checked and set up before any training code imports TensorFlow.

tf-models-official builds its networks with `tf_keras` (Keras 2), and TensorFlow 2.20's
`tf.keras` is Keras 3: mixing the two silently freezes most encoder weights. So every module
that imports tf_keras, tf-models or another such module imports this one first, before
TensorFlow (tests/test_import_graph.py checks the order). It

* checks that the extra is installed: a program (``python -m tetra_tf.train``, ``export``,
  ``distillation``) without it stops with one line naming the ``pip install`` to run, a
  library caller gets `tetra_tf.extras.MissingExtraError`;
* selects Keras 2 for TensorFlow (``TF_USE_LEGACY_KERAS=1``, unless set);
* in a program, keeps TensorFlow's C++ start-up notices off stderr (`cli.quiet_tensorflow`).

Parsing needs none of this: the runtime never imports this module (tests/test_runtime.py),
and importing `tetra_tf` changes nothing in the process.
"""

from __future__ import annotations

import os
import sys

from tetra_tf import cli, extras


def _program() -> str | None:
    """``python -m tetra_tf.NAME`` when this process runs one of tetra_tf's programs, else
    None (a library caller: a notebook, a test, a tool that imports training code)."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    name = getattr(spec, "name", None) or ""
    return f"python -m {name}" if name.startswith("tetra_tf.") else None


_PROGRAM = _program()
extras.require("train", _PROGRAM)
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
if _PROGRAM is not None:
    cli.quiet_tensorflow()
