"""Tests for tetra_tf/cli.py: a program says the library's errors in its own flags."""

import pytest
from absl import flags

from tetra_tf import cli
from tetra_tf.errors import ExportError, InputError


@pytest.fixture
def program_flags() -> flags.FlagValues:
    """A program's flags: --train_data, --model_dir, --folds (none of the others)."""
    flag_values = flags.FlagValues()
    for name in ("train_data", "model_dir"):
        flags.DEFINE_string(name, None, "", flag_values=flag_values)
    flags.DEFINE_integer("folds", None, "", flag_values=flag_values)
    return flag_values


def test_parameters_named_by_the_error_become_the_programs_flags(program_flags):
    error = InputError("/runs/model_dir/m was trained with mixed_layers=1 (this run: "
                       "mixed_layers=2): use a new model_dir", ["mixed_layers", "model_dir"])
    # model_dir is a flag (not inside the path); mixed_layers is none of this program's.
    assert cli.in_flag_words(error, flag_values=program_flags) == (
        "/runs/model_dir/m was trained with mixed_layers=1 (this run: mixed_layers=2): use "
        "a new --model_dir")
    error = InputError("train_data: d is not a directory; head_train_data, train_data_x",
                       ["train_data"])
    assert cli.in_flag_words(error, flag_values=program_flags) == (
        "--train_data: d is not a directory; head_train_data, train_data_x")


def test_a_parameter_given_by_a_flag_of_another_name(program_flags):
    error = InputError("num_folds=1: at least 2", ["num_folds"])
    assert (cli.in_flag_words(error, {"num_folds": "folds"}, program_flags)
            == "--folds=1: at least 2")
    assert cli.in_flag_words(error, flag_values=program_flags) == "num_folds=1: at least 2"


def test_other_errors_are_said_as_they_are(program_flags):
    assert cli.in_flag_words(ExportError("model_dir: no SavedModel"),
                             flag_values=program_flags) == "model_dir: no SavedModel"
    assert cli.in_flag_words(InputError("train_data is empty"),
                             flag_values=program_flags) == "train_data is empty"


def test_guarded_prints_the_programs_words_in_one_line(capsys):
    flags.DEFINE_string("a_parameter", None, "")
    try:
        def main(argv):
            raise InputError("a_parameter=x: no good\nsecond line", ["a_parameter"])

        assert cli.guarded(main, ["program"]) == cli.EXIT_USAGE
        assert capsys.readouterr().err == "error: --a_parameter=x: no good\n"
    finally:
        delattr(flags.FLAGS, "a_parameter")
