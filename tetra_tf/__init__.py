"""tetra-tf: tetra-tagging constituency parsing (Kitaev & Klein, 2020) in TensorFlow.

tf-models-official builds its networks with `tf_keras` (Keras 2). TensorFlow 2.20's
`tf.keras` is Keras 3, and mixing the two silently freezes most encoder weights, so
wherever Keras 2 is installed (the [train] extra) it is selected here, before anything
imports TensorFlow. Parsing uses no Keras: a runtime-only install has no `tf_keras`, and
TensorFlow (and tensorflow-text's layers) then use the Keras 3 that TensorFlow requires.
"""

import importlib.util
import os

if importlib.util.find_spec("tf_keras") is not None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow's C++ start-up notices (CPU features, no CUDA) are noise for a parser's users.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy, so that `import tetra_tf` stays light for the tree and tag utilities.
    if name == "Parser":
        from tetra_tf.parser import Parser

        return Parser
    if name == "Constraints":
        from tetra_tf.constraints import Constraints

        return Constraints
    raise AttributeError(f"module 'tetra_tf' has no attribute {name!r}")
