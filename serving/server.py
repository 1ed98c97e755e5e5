#!/usr/bin/env python3
r"""A local server that speaks TensorFlow Serving's REST and gRPC APIs (docs/guides/serving.md).

  python serving/server.py [--model_base_path=models/tetra] [--model_name=tetra] \
      [--rest_api_port=8501] [--port=8500]

Without --model_base_path (or --model_config_file) it serves the model packaged with
tetra-tf.

The server is the package tetra_tf.serving (pip install 'tetra-tf[serving]'); this script is
its entry point (`--help` lists the flags).
"""

from tetra_tf import cli

cli.quiet_tensorflow()  # before TensorFlow loads

from tetra_tf.serving.main import run  # noqa: E402

if __name__ == "__main__":
    run()
