"""Shared command-line plumbing for the project's absl programs."""

from __future__ import annotations

import sys

from absl import flags

_HELP_FLAGS = ("--help", "-help", "--helpshort", "--helpfull", "--helpxml", "-h", "-?")


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with a one-line message and exit code 2 for bad flags.

    Pass as `app.run(main, flags_parser=parse_flags)`.
    """
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        print(f"error: {e} (see --help)", file=sys.stderr)
        sys.exit(2)
    except SystemExit:
        # absl exits with 1 after printing --help; asking for help is no failure.
        if any(arg.split("=")[0] in _HELP_FLAGS for arg in argv[1:]):
            sys.exit(0)
        raise
