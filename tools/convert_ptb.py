#!/usr/bin/env python3
# A thin wrapper: the program is tetra_tf/convert.py (`python -m tetra_tf.convert` runs the
# same, its library is tetra_tf/data/convert.py); its docstring and flags are this program's
# --help.
from tetra_tf import convert as program
from tetra_tf.data import convert

__doc__ = program.__doc__

if __name__ == "__main__":
    convert.run_program()
