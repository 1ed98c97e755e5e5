"""Tests for tetra_tf/integrations/bulk_options.py: the bulk programs' common options and ordered output."""

import io
import os

import pytest
from absl import flags

from tetra_tf import cli, packaged_models
from tetra_tf.contract import export_format
from tetra_tf.integrations import bulk_options
from conftest import run_python

CORPUS_OPTIONS = ("model_dir", "corpus_input", "corpus_output", "tokenize", "batch_size",
                  "max_words", "max_line_bytes", "ordered", "span_marginals")


@pytest.fixture
def export_dir(tmp_path):
    """A directory that holds a SavedModel file (all that `check` reads)."""
    (tmp_path / "saved_model.pb").write_bytes(b"")
    return str(tmp_path)


def _absl(keys, argv):
    flag_values = flags.FlagValues()
    bulk_options.define_absl_flags(keys, flag_values)
    flag_values(["program", *argv])
    return bulk_options.absl_values(keys, flag_values)


def _argparse(keys, argv):
    parser = cli.ArgumentParser(prog="program")
    bulk_options.add_argparse_arguments(parser, keys)
    return vars(parser.parse_args(argv))


def test_both_adapters_give_the_same_values(export_dir):
    for argv in ([], [f"--model_dir={export_dir}", "--input=a", "--input=b", "--output=o",
                      "--tokenize", "--batch_size=8", "--max_words=3",
                      "--max_line_bytes=100", "--ordered", "--span_marginals=0.25"]):
        assert _absl(CORPUS_OPTIONS, argv) == _argparse(CORPUS_OPTIONS, argv)
    values = _absl(CORPUS_OPTIONS, [])
    assert values["batch_size"] == export_format.DEFAULT_BATCH_SIZE
    assert values["corpus_input"] is None and values["ordered"] is False
    assert values["span_marginals"] is None
    assert _argparse(CORPUS_OPTIONS, ["--span_marginals=0"])["span_marginals"] == 0.0


def test_a_program_gets_only_the_options_it_names():
    parser = cli.ArgumentParser(prog="program")
    bulk_options.add_argparse_arguments(parser, ("model_dir", "batch_size"))
    with pytest.raises(cli.UsageError, match="unrecognized arguments: --ordered"):
        parser.parse_args(["--ordered"])
    flag_values = flags.FlagValues()
    bulk_options.define_absl_flags(("model_dir", "on_error", "errors"), flag_values)
    assert sorted(flag_values) == ["errors", "model_dir", "on_error"]
    assert flag_values["model_dir"].help == bulk_options.OPTIONS["model_dir"].help
    assert flag_values["model_dir"].default is None  # the packaged default model


@pytest.mark.parametrize("argv, message", [
    (["--model_dir=EXPORT", "--output=o"], "--input is required (see --help)"),
    (["--model_dir=EXPORT", "--input=a"], "--output is required (see --help)"),
    (["--model_dir=EXPORT", "--input=a", "--output=o", "--batch_size=0"],
     "--batch_size must be positive"),
    (["--model_dir=EXPORT", "--input=a", "--output=o", "--max_words=-1"],
     "--max_words must be 0 or more"),
    (["--model_dir=EXPORT", "--input=a", "--output=o", "--max_line_bytes=0"],
     "--max_line_bytes must be positive"),
    (["--model_dir=EXPORT", "--input=a", "--output=o", "--span_marginals=1.5"],
     "--span_marginals is a probability from 0 to 1, got 1.5"),
    (["--model_dir=EXPORT", "--input=a", "--output=o", "--span_marginals=-0.1"],
     "--span_marginals is a probability from 0 to 1, got -0.1"),
    (["--model_dir=NOWHERE", "--input=a", "--output=o", "--span_marginals=nan"],
     "--span_marginals is a probability from 0 to 1, got nan"),  # before the model is looked for
    (["--model_dir=NOWHERE/1", "--input=a", "--output=o"],
     "--model_dir: NOWHERE/1 holds no SavedModel (saved_model.pb); export one with python -m "
     "tetra_tf.export"),
    (["--model_dir=NOWHERE", "--input=a", "--output=o"],
     "--model_dir: NOWHERE is neither an export's path nor a packaged model's name (packaged: "
     + (", ".join(packaged_models.names()) or "none") + ")"),
])
def test_check_names_the_first_problem_whichever_adapter(export_dir, argv, message):
    argv = [arg.replace("EXPORT", export_dir) for arg in argv]
    for values in (_absl(CORPUS_OPTIONS, argv), _argparse(CORPUS_OPTIONS, argv)):
        with pytest.raises(cli.UsageError) as raised:
            bulk_options.check(values)
        assert str(raised.value) == message


def test_without_model_dir_the_packaged_default_model_is_checked(monkeypatch):
    monkeypatch.setattr(packaged_models, "DEFAULT_MODEL", "not_shipped")
    for values in (_absl(CORPUS_OPTIONS, ["--input=a", "--output=o"]),
                   _argparse(CORPUS_OPTIONS, ["--input=a", "--output=o"])):
        assert values["model_dir"] is None
        with pytest.raises(cli.UsageError, match=r"^--model_dir: no packaged model named "
                           r"not_shipped \(packaged: "):
            bulk_options.check(values)


def test_check_errors_without_skip(export_dir):
    keys = ("model_dir", "on_error", "errors")
    with pytest.raises(cli.UsageError, match="--errors needs --on_error=skip"):
        bulk_options.check(_absl(keys, [f"--model_dir={export_dir}", "--errors=e.txt"]))
    bulk_options.check(_absl(keys, [f"--model_dir={export_dir}", "--errors=e.txt",
                                    "--on_error=skip"]))
    with pytest.raises(cli.UsageError, match="--on_error must be one of fail, skip"):
        bulk_options.check({"on_error": "maybe"})


def test_common_folder_of_parts_is_that_of_the_whole(tmp_path, monkeypatch):
    paths = [f"{tmp_path}/a/x.txt", f"{tmp_path}/a/b/y.txt", f"{tmp_path}/a/b/c/z.gz"]
    assert bulk_options.common_folder(paths) == f"{tmp_path}/a/"
    parts = [bulk_options.common_folder(paths[:1]), "",
             bulk_options.common_folder(paths[1:])]
    assert bulk_options.common_folder(parts) == f"{tmp_path}/a/"
    assert bulk_options.common_folder([]) == ""
    assert bulk_options.common_folder(["gs://b/x/1.txt", "gs://b/x/y/2.txt"]) == "gs://b/x/"
    assert bulk_options.common_folder([f"file:{tmp_path}/a.txt", f"file://{tmp_path}/b"]) == (
        f"{tmp_path}/")
    monkeypatch.chdir(tmp_path)
    assert bulk_options.common_folder(["c/one.txt", "c/two.txt"]) == f"{tmp_path}/c/"


def test_ordered_writer_writes_a_line_per_input_line(tmp_path):
    root = f"file:{tmp_path}/in/"
    writer = bulk_options.OrderedWriter(f"file:{tmp_path}/out-ordered", root)
    assert writer.target(f"file:{tmp_path}/in/sub/a.txt") == (
        f"file:{tmp_path}/out-ordered/sub/a.txt.trees")
    written = writer.write(f"{tmp_path}/in/sub/a.txt",
                           [(1, "(TOP (X a))"), (2, None), (3, "(TOP (X ü))")])
    with open(written.removeprefix("file:"), "rb") as f:
        assert f.read() == "(TOP (X a))\n\n(TOP (X ü))\n".encode()
    written = writer.write(f"file:{tmp_path}/in/empty.txt", [])
    assert os.path.getsize(written.removeprefix("file:")) == 0
    with pytest.raises(RuntimeError, match="line 3 where line 2 belongs"):
        writer.write(f"{tmp_path}/in/gap.txt", [(1, "t"), (3, "t")])


def test_ordered_writer_uses_the_given_opener():
    opened = {}

    class Kept(io.BytesIO):
        def close(self):
            opened[self.path] = self.getvalue()

    def open_file(path):
        stream = Kept()
        stream.path = path
        return stream

    writer = bulk_options.OrderedWriter("gs://bucket/out-ordered", "gs://bucket/in/", open_file)
    writer.write("gs://bucket/in/a.txt", [(1, "t")])
    writer.write("gs://other/b.txt", [(1, None)])
    assert opened == {"gs://bucket/out-ordered/a.txt.trees": b"t\n",
                      "gs://bucket/out-ordered/other/b.txt.trees": b"\n"}
    assert bulk_options.ordered_folder("out/trees/") == "out/trees-ordered"


def test_importing_it_loads_no_tensorflow():
    assert run_python("import sys\nimport tetra_tf.integrations.bulk_options\n"
                      "print('tensorflow' in sys.modules)") == "False"
