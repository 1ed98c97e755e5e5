#!/usr/bin/env python3
"""A small client for the parser behind TF Serving's REST API or serving/server.py.

  python serving/client.py --server=http://127.0.0.1:8501 --model_name=tetra "The cat sat ."

The client is tetra_tf.serving.client (its docstring has the details); this script is its
command line.
"""

from tetra_tf.serving.client import run_cli

if __name__ == "__main__":
    run_cli()
