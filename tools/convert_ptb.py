#!/usr/bin/env python3
# A thin wrapper: the program is tetra_tf/convert.py (`python -m tetra_tf.convert` runs the
# same); its docstring and flags are this program's --help.
from absl import flags

from tetra_tf import cli, convert

__doc__ = convert.__doc__

if __name__ == "__main__":
    convert.define_flags()
    flags.adopt_module_key_flags(convert)
    cli.run(convert.main)
