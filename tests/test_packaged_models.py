"""Tests for tetra_tf/packaged_models.py: a packed export loads by name and by default, parses
as its float32 source does, and missing or damaged files are refused with one line."""

import json
import os
import shutil
import subprocess
import sys
import types

import pytest

from tetra_tf import packaged_models, parse
from tetra_tf.contract import export_format
from tetra_tf.errors import ExportError
from tetra_tf.parser import Parser
from tetra_tf.trees import treebank
from conftest import run_cli, subprocess_env

SENTENCES = [s.split() for s in ("The cat sat on the mat .", "She says he even left early .",
                                 "Mr. Smith ?", "3 dogs , 2 cats and a bird")]


@pytest.fixture(scope="module")
def packaged_dir(tiny_export_dir, tmp_path_factory):
    """A packaged-models folder holding the tiny export packed as `tiny`."""
    root = str(tmp_path_factory.mktemp("packaged"))
    packaged_models.pack(tiny_export_dir, "tiny", 3, os.path.join(root, "tiny"))
    return root


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh $TETRA_TF_HOME, where packaged models are written out."""
    monkeypatch.setenv("TETRA_TF_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def as_default(packaged_dir, monkeypatch):
    """The packed tiny export is the package's only model, and its default."""
    monkeypatch.setattr(packaged_models, "PACKAGED_DIR", packaged_dir)
    monkeypatch.setattr(packaged_models, "DEFAULT_MODEL", "tiny")


@pytest.fixture(scope="module")
def source_parser(tiny_export_dir):
    return Parser(tiny_export_dir)


def _trees(parser):
    return [result.bracketed for result in parser.parse_each(SENTENCES)]


def test_packed_weights_are_float16_at_half_the_size(packaged_dir, tiny_export_dir):
    import tensorflow as tf

    packed = tf.train.load_checkpoint(os.path.join(packaged_dir, "tiny",
                                                   packaged_models.PACKED_WEIGHTS))
    floats = {str(dtype) for dtype in packed.get_variable_to_dtype_map().values()
              if dtype.is_floating}
    assert floats == {"<dtype: 'float16'>"}
    size = lambda d: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    source = size(os.path.join(tiny_export_dir, "variables"))
    assert size(os.path.join(packaged_dir, "tiny", "weights_float16")) < 0.6 * source
    assert not os.path.exists(os.path.join(packaged_dir, "tiny", "variables"))


def test_a_packaged_model_parses_as_its_source_export(packaged_dir, home, source_parser):
    export_dir = packaged_models.export_dir("tiny", packaged_dir)
    assert export_dir == os.path.join(str(home), "models", "tiny", "3")  # TF Serving's layout
    packaged = Parser(export_dir)
    assert _trees(packaged) == _trees(source_parser)
    scores = [r.score for r in packaged.parse_each(SENTENCES)]
    source_scores = [r.score for r in source_parser.parse_each(SENTENCES)]
    assert scores == pytest.approx(source_scores, abs=0.05)  # float16 rounding, no more


def test_the_export_is_written_once_then_reused(packaged_dir, home, monkeypatch):
    first = packaged_models.export_dir("tiny", packaged_dir)
    monkeypatch.setattr(packaged_models, "_write_export",
                        lambda *args: pytest.fail("written again"))
    assert packaged_models.export_dir("tiny", packaged_dir) == first


def test_an_unwritable_home_gets_a_copy_of_its_own(packaged_dir, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("TETRA_TF_HOME", str(blocker / "home"))
    export_dir = packaged_models.export_dir("tiny", packaged_dir)
    assert not export_dir.startswith(str(blocker))
    assert os.path.isfile(os.path.join(export_dir, "saved_model.pb"))
    shutil.rmtree(export_dir)


def test_parser_and_resolve_take_a_name_none_or_a_path(as_default, home, tiny_export_dir,
                                                       source_parser):
    assert packaged_models.resolve(tiny_export_dir) == tiny_export_dir
    assert packaged_models.resolve(None) == packaged_models.resolve("tiny")
    assert _trees(Parser()) == _trees(source_parser)
    assert Parser("tiny").export_dir == packaged_models.export_dir("tiny")


def test_an_unknown_name_is_refused_naming_the_packaged_ones(as_default):
    with pytest.raises(ExportError, match=r"^tinny is neither an export's path nor a packaged "
                       r"model's name \(packaged: tiny\)$"):
        Parser("tinny")


def test_a_path_is_never_taken_for_a_name(as_default, tmp_path, monkeypatch):
    (tmp_path / "tiny").mkdir()
    monkeypatch.chdir(tmp_path)
    assert not packaged_models.is_name("tiny")  # ./tiny exists: the user's folder
    assert not packaged_models.is_name("models/tiny")
    with pytest.raises(ExportError, match="tiny"):
        Parser("tiny")


@pytest.mark.parametrize("damage, message", [
    (lambda d: os.remove(os.path.join(d, "saved_model.pb")), "saved_model.pb is missing"),
    (lambda d: open(os.path.join(d, "assets", "encoder_vocab.txt"), "a").write("x"),
     "assets/encoder_vocab.txt does not match its SHA-256"),
    (lambda d: open(os.path.join(d, "weights_float16", "variables.index"), "ab").write(b"\0"),
     "weights_float16/variables.index does not match its SHA-256"),
    (lambda d: open(os.path.join(d, "manifest.json"), "w").write("{"), "manifest.json is unreadable"),
    (lambda d: shutil.rmtree(d), "no packaged model named tiny"),
])
def test_missing_or_damaged_files_are_refused_in_one_line(packaged_dir, home, tmp_path,
                                                          damage, message):
    copy = str(tmp_path / "packaged")
    shutil.copytree(packaged_dir, copy)
    damage(os.path.join(copy, "tiny"))
    with pytest.raises(ExportError) as raised:
        packaged_models.export_dir("tiny", copy)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)
    assert not os.path.exists(os.path.join(str(home), "models", "tiny", "3"))


def test_the_parse_cli_takes_a_packaged_models_name(as_default, home, source_parser):
    result = run_cli(parse.define_flags, parse.main, "--model_dir=tiny",
                     stdin="\n".join(" ".join(s) for s in SENTENCES) + "\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == _trees(source_parser)


def test_the_parse_cli_refuses_a_damaged_packaged_model_in_one_line(as_default, home, tmp_path,
                                                                    monkeypatch):
    copy = str(tmp_path / "packaged")
    shutil.copytree(packaged_models.PACKAGED_DIR, copy)
    os.remove(os.path.join(copy, "tiny", "saved_model.pb"))
    monkeypatch.setattr(packaged_models, "PACKAGED_DIR", copy)
    result = run_cli(parse.define_flags, parse.main, "--model_dir=tiny", stdin="Hi\n")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --model_dir: the packaged model tiny is damaged: saved_model.pb is missing "
        "(reinstall tetra-tf, or pass an export's path)"]


def test_the_manifest_lists_every_file_with_its_digest(packaged_dir):
    with open(os.path.join(packaged_dir, "tiny", packaged_models.MANIFEST_FILE)) as f:
        record = json.load(f)
    on_disk = {os.path.relpath(os.path.join(root, name), os.path.join(packaged_dir, "tiny"))
               for root, _, names in os.walk(os.path.join(packaged_dir, "tiny"))
               for name in names} - {packaged_models.MANIFEST_FILE}
    assert set(record["files"]) == on_disk
    assert (record["name"], record["version"], record["weights_dtype"]) == ("tiny", "3", "float16")


# --------------------------------------------------------------------------------------
# The packaged default in every way in that takes a model


def test_the_parse_cli_parses_with_the_packaged_default_without_model_dir(as_default, home,
                                                                          source_parser):
    result = run_cli(parse.define_flags, parse.main,
                     stdin="\n".join(" ".join(s) for s in SENTENCES) + "\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == _trees(source_parser)


def test_the_parse_cli_describes_the_packaged_default(as_default, home):
    result = run_cli(parse.define_flags, parse.main, "--describe")
    assert result.returncode == 0, result.stderr
    described = export_format.describe(packaged_models.export_dir("tiny"))
    assert result.stdout == described


def test_the_beam_handler_loads_the_packaged_default_without_a_model(as_default, home,
                                                                      source_parser):
    pytest.importorskip("apache_beam")
    from tetra_tf.integrations import beam as tetra_beam

    parser = tetra_beam.ParseModelHandler().load_model()
    assert parser.export_dir == packaged_models.export_dir("tiny")
    assert _trees(parser) == _trees(source_parser)


def test_the_spacy_component_parses_with_the_packaged_default_without_config(as_default,
                                                                              home,
                                                                              source_parser):
    spacy = pytest.importorskip("spacy")
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    component = nlp.add_pipe("tetra_tf")
    assert component.model_dir is None
    assert component.parser.export_dir == packaged_models.export_dir("tiny")
    sentence = next(nlp("The cat sat on the mat.").sents)
    tree = source_parser.parse([token.text for token in sentence])  # the source export's
    parsed = treebank.parse_tree(sentence._.parse_string)
    assert parsed == (tree if len(tree) > 1 else tree[0])  # a sentence's tree: no TOP


class _ServerFlags:
    """The server's flags as `_model_server_config` reads them, none given on the command line."""

    def __init__(self, **values):
        self.model_config_file, self.model_name = None, "tetra"
        self.model_base_path = None
        self.__dict__.update(values)

    def __getitem__(self, name):
        return types.SimpleNamespace(present=False, value=getattr(self, name))


@pytest.mark.parametrize("model_base_path", [None, "tiny"])
def test_the_server_serves_the_packaged_default_without_a_base_path(as_default, home,
                                                                     model_base_path):
    pytest.importorskip("grpc")
    from tetra_tf.serving import main as server_main

    config = server_main._model_server_config(_ServerFlags(model_base_path=model_base_path))
    (model,) = config.model_config_list.config
    assert model.name == "tetra"
    assert model.base_path == os.path.join(str(home), "models", "tiny")
    assert os.path.isfile(os.path.join(model.base_path, "3", "saved_model.pb"))


def test_a_users_export_overrides_the_default_in_every_way_in(as_default, home,
                                                              tiny_export_dir, tmp_path):
    from tetra_tf.integrations import bulk_options

    assert Parser(tiny_export_dir).export_dir == tiny_export_dir
    base_path = str(tmp_path / "base")
    shutil.copytree(tiny_export_dir, os.path.join(base_path, "7"))
    assert packaged_models.serving_base_path(base_path) == base_path
    bulk_options.check({"model_dir": tiny_export_dir})  # no error: the export is read
    with pytest.raises(Exception, match="--model_dir: .*"):
        bulk_options.check({"model_dir": str(tmp_path / "nothing_here")})
    assert not os.path.exists(os.path.join(str(home), "models"))  # the default never written


# --------------------------------------------------------------------------------------
# The model shipped in the package


@pytest.fixture(scope="module")
def shipped_home(tmp_path_factory):
    """A $TETRA_TF_HOME of this module's own for the shipped model's float32 export."""
    return str(tmp_path_factory.mktemp("shipped_home"))


@pytest.fixture
def shipped(shipped_home, monkeypatch):
    monkeypatch.setenv("TETRA_TF_HOME", shipped_home)
    return packaged_models.DEFAULT_MODEL


def test_the_default_model_ships_intact_within_50_mb_with_its_licence():
    record = packaged_models.verify(packaged_models.DEFAULT_MODEL)
    packed = os.path.join(packaged_models.PACKAGED_DIR, packaged_models.DEFAULT_MODEL)
    size = sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(packed) for name in names)
    assert size <= 50 * 2**20, size
    with open(os.path.join(packed, "MODEL_CARD.md"), encoding="utf-8") as f:
        card = f.read()
    assert "non-commercial" in card and "Apache-2.0" in card
    assert set(record["files"]) >= {"MODEL_CARD.md", "saved_model.pb"}


def test_the_quick_start_command_prints_a_tree_with_the_shipped_model(shipped, shipped_home):
    env = dict(subprocess_env(), TETRA_TF_HOME=shipped_home)
    result = subprocess.run([sys.executable, "-m", "tetra_tf.parse", "--tokenize"],
                            input="The cat sat on the mat.\n", env=env, capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    (line,) = result.stdout.splitlines()
    tree = treebank.parse_tree(line)
    assert tree.label() == "TOP" and tree.leaves() == "The cat sat on the mat .".split()
    assert [label for label, _ in tree.pos()][-1] == "."


def test_describe_shows_the_shipped_models_card_with_its_licence_first(shipped):
    result = run_cli(parse.define_flags, parse.main, "--describe")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"# {packaged_models.DEFAULT_MODEL}\n")
    card, generated = result.stdout.split("# tetra-tf model card", 1)
    assert "non-commercial use only" in card
    assert "training data licence: NLTK's Penn Treebank sample" in generated


def test_the_shipped_model_draws_and_writes_json(shipped, tmp_path):
    lines = "The cat sat on the mat .\nHe said <b> & left .\n"
    result = run_cli(parse.define_flags, parse.main, "--output_format=json", "--marginals",
                     stdin=lines)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["words"] for r in records] == [line.split() for line in lines.splitlines()]
    assert all(r["tree"].startswith("(TOP ") and r["constituents"] for r in records)
    result = run_cli(parse.define_flags, parse.main, "--output_format=svg",
                     f"--output={tmp_path / 'svg'}", stdin=lines)
    assert result.returncode == 0, result.stderr
    drawings = sorted(os.listdir(tmp_path / "svg"))
    assert len(drawings) == 2
    svg = "".join((tmp_path / "svg" / name).read_text(encoding="utf-8") for name in drawings)
    assert "&lt;b&gt;" in svg and "&amp;" in svg and "<b>" not in svg
