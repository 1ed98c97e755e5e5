"""Shared command-line plumbing for the project's absl programs.

Every entry point runs through `run`: absl flags parsed by `parse_flags`, TensorFlow's C++
start-up notices kept off stderr (`quiet_tensorflow`), and one convention for what a user
sees when something goes wrong:

  0  done
  1  an internal failure: one line, ``error: TYPE: MESSAGE`` (never a traceback)
  2  a user's mistake (bad flags, unreadable input, a missing model): ``error: MESSAGE``
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from typing import Callable, Mapping

from absl import app, flags

from tetra_tf.errors import InputError, TetraError

_HELP_FLAGS = ("--help", "-help", "--helpshort", "--helpfull", "--helpxml", "-h", "-?")

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2

# Flags that the helpers below define belong to the module that calls them (for --help).
flags.disclaim_key_flags()


class UsageError(TetraError):
    """A mistake in a command's flags or arguments: one line, exit code 2."""


def quiet_tensorflow() -> None:
    """Keeps TensorFlow's C++ start-up notices (CPU features, no CUDA) off a program's
    stderr, unless TF_CPP_MIN_LOG_LEVEL is set; takes effect where TensorFlow is imported
    after it (`run` calls it before the program's main)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, with a one-line message and exit code 2 for bad flags."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        print(f"error: {e} (see --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except SystemExit:
        # absl exits with 1 after printing --help; asking for help is no failure.
        if any(arg.split("=")[0] in _HELP_FLAGS for arg in argv[1:]):
            sys.exit(EXIT_OK)
        raise


def require(*names: str) -> None:
    """Raises UsageError naming the first of these flags that is not set."""
    for name in names:
        if getattr(flags.FLAGS, name) in (None, ""):
            raise UsageError(f"--{name} is required (see --help)")


def _first_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0][:300] if lines else ""


def in_flag_words(error: BaseException, flag_names: Mapping[str, str] | None = None,
                  flag_values: flags.FlagValues = flags.FLAGS) -> str:
    """An error's message as a program says it: each parameter an `InputError` names that
    is one of the program's flags is written --FLAG.

    Args:
      error: the exception.
      flag_names: a parameter → the flag of another name that gives it (default: the
        flag of the parameter's own name).
      flag_values: the program's flags.
    """
    message = str(error)
    for parameter in error.parameters if isinstance(error, InputError) else ():
        flag = (flag_names or {}).get(parameter, parameter)
        if flag in flag_values:  # the name as a word of its own, not in a path or a name
            message = re.sub(rf"(?<![^\s(]){re.escape(parameter)}(?=[=:\s,)]|$)",
                             f"--{flag}", message)
    return message


def guarded(main: Callable[[list[str]], int | None], argv: list[str],
            user_errors: tuple[type[BaseException], ...] = (),
            flag_names: Mapping[str, str] | None = None) -> int:
    """Runs main(argv) under the exit-code convention above; returns the exit code.

    A `TetraError` (the library's errors for a caller's mistake, UsageError among them),
    FileNotFoundError or one of `user_errors` prints ``error: MESSAGE`` (exit 2), with the
    program's flags for the parameters it names (`in_flag_words`); any other exception
    ``error: TYPE: MESSAGE`` (exit 1); never a traceback.
    """
    try:
        code = main(argv)
    except (TetraError, FileNotFoundError) + tuple(user_errors) as e:
        message = _first_line(in_flag_words(e, flag_names))
        print(f"error: {message or type(e).__name__}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # pylint: disable=broad-except
        print(f"error: {type(e).__name__}: {_first_line(str(e))}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK if code is None else code


def adopt_program_flags(library: str) -> None:
    """Lists the flags that the module `library` defined in the running program's --help
    (absl shows the main module's own: a program's driver, tetra_tf/train.py, defines none)."""
    for flag in flags.FLAGS.get_key_flags_for_module(library):
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def run(main: Callable[[list[str]], int | None],
        user_errors: tuple[type[BaseException], ...] = (), takes_arguments: bool = False,
        flag_names: Mapping[str, str] | None = None) -> None:
    """Runs `main` as an absl program under the exit-code convention above.

    Args:
      main: takes argv (the program, then the positional arguments) and returns an exit
        code (None: 0).
      user_errors: exceptions besides TetraError and FileNotFoundError that are the
        user's mistake (exit 2).
      takes_arguments: whether positional arguments are allowed (else a usage error).
      flag_names: the library's parameters that the program's flags of other names give
        (parameter → flag), for its messages (`in_flag_words`).
    """

    def checked_main(argv: list[str]) -> int:
        if len(argv) > 1 and not takes_arguments:
            print(f"error: unexpected arguments {' '.join(argv[1:])} (see --help)",
                  file=sys.stderr)
            return EXIT_USAGE
        return guarded(main, argv, user_errors, flag_names)

    quiet_tensorflow()
    app.run(checked_main, flags_parser=parse_flags)


def run_argv(main: Callable[[list[str]], int | None], argv: list[str] | None = None,
             user_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Runs `main` on the command line's arguments (for programs that parse their own, such
    as Beam's argparse options) under the same convention, then exits with its code."""
    quiet_tensorflow()
    sys.exit(guarded(main, sys.argv[1:] if argv is None else argv, user_errors))


class ArgumentParser(argparse.ArgumentParser):
    """argparse for programs run by `run_argv`: a bad argument is a UsageError (exit 2)."""

    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def define_dataclass_flags(config_class: type, helps: Mapping[str, str],
                           enums: Mapping[str, list[str]] | None = None,
                           skip: tuple[str, ...] = (),
                           flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """One flag per field of a dataclass, named and typed as the field, its default as default.

    Args:
      config_class: the dataclass (its fields are int, float, bool or str).
      helps: the help text of every field.
      enums: allowed values of str fields that take one of a few.
      skip: fields whose flags the caller defines itself.
      flag_values: where to define them (another namespace than the program's own: to
        read another program's command line).
    """
    defaults = config_class()
    definers = {"int": flags.DEFINE_integer, "float": flags.DEFINE_float,
                "bool": flags.DEFINE_bool, "str": flags.DEFINE_string}
    for field in dataclasses.fields(config_class):
        if field.name in skip:
            continue
        default = getattr(defaults, field.name)
        if enums and field.name in enums:
            flags.DEFINE_enum(field.name, default, enums[field.name], helps[field.name],
                              flag_values=flag_values)
        else:
            definers[field.type](field.name, default, helps[field.name],
                                 flag_values=flag_values)


def dataclass_from_flags(config_class: type, flag_values: flags.FlagValues = flags.FLAGS,
                         **overrides):
    """The dataclass with each field taken from the flag of its name (see above)."""
    values = {field.name: getattr(flag_values, field.name)
              for field in dataclasses.fields(config_class)}
    values.update(overrides)
    return config_class(**values)
