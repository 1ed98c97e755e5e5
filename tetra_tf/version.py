"""tetra-tf's version (setup.py, model cards and exports record it)."""

__version__ = "0.1.0"
