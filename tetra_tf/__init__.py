"""tetra-tf: tetra-tagging constituency parsing (Kitaev & Klein, 2020) in TensorFlow.

Importing the package changes nothing in the process (no environment variable, no
TensorFlow). Training code selects the Keras it needs where it is imported
(`tetra_tf.train_extra`); parsing uses no Keras.
"""

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
