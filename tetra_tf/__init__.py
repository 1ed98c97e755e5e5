"""tetra-tf: tetra-tagging constituency parsing (Kitaev & Klein, 2020) in TensorFlow.

Importing the package changes nothing in the process (no environment variable, no
TensorFlow). Training code selects the Keras it needs where it is imported
(`tetra_tf.train_extra`); parsing uses no Keras.
"""

import os as _os

from tetra_tf.version import __version__  # noqa: F401

# Modules that moved keep their old paths for a release: shims in _moved/ (see its docstring).
__path__.append(_os.path.join(__path__[0], "_moved"))


def __getattr__(name):
    # Lazy, so that `import tetra_tf` stays light for the tree and tag utilities.
    if name == "Parser":
        from tetra_tf.parser import Parser  # noqa: PLC0415

        return Parser
    if name == "Constraints":
        from tetra_tf.decode.constraints import Constraints

        return Constraints
    raise AttributeError(f"module 'tetra_tf' has no attribute {name!r}")
