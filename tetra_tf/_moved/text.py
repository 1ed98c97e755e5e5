"""Moved to `tetra_tf.contract.text`.

This old path warns once and goes away in tetra-tf 0.3.
"""

from tetra_tf import _moved

_moved.alias(__name__, "tetra_tf.contract.text")
