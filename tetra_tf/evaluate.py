"""The earlier name of `tetra_tf.evalb`, the EVALB-equivalent scorer, kept so that
`python -m tetra_tf.evaluate GOLD PRED` and `from tetra_tf import evaluate` keep working."""

from tetra_tf.evalb import *  # noqa: F401,F403
from tetra_tf.evalb import _run_cli

if __name__ == "__main__":
    _run_cli()
