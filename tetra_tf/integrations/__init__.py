"""The bulk and library ways in besides the parse program: Apache Beam, Apache Spark (and a
local cluster for tests and benchmarks), spaCy, and the options and output writers they
share with ``python -m tetra_tf.parse``.
"""
