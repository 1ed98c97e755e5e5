"""Documentation that cannot rot.

* The site builds: ``mkdocs build --strict`` (broken links, missing pages and docstrings that
  do not parse fail it), with the API pages rendered from the docstrings.
* README.md is a front page (at most 250 lines) and no page is a run log (no "HH:MM UTC").
* The README's relative links lead to files that exist.
* docs/reference/commands.md is what the commands' --help prints today
  (`python docs/gen_commands.py` rewrites it).
* Every README quick-start block (``<!-- quickstart: NAME -->`` before it) runs with the
  model packaged with tetra-tf (as a user's first parse does), and both its real output and
  the output the README shows have the format the block promises. Each test's id names its block; the command run is
  printed and in every failure message.
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO_ROOT, free_port, served_until_done, subprocess_env

README = os.path.join(REPO_ROOT, "README.md")
DOCS_DIR = os.path.join(REPO_ROOT, "docs")
MAX_README_LINES = 250
CLOCK_TIME = re.compile(r"[0-9][0-9]:[0-9][0-9] UTC")
EXAMPLE_REST_PORT, EXAMPLE_GRPC_PORT = "8501", "8500"


def _doc_files() -> list[str]:
    return [README] + sorted(glob.glob(os.path.join(DOCS_DIR, "**", "*.md"), recursive=True))


# --------------------------------------------------------------------------------------
# The site, the README's size, no run logs, links


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    missing = [name for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")
               if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"the docs extra is not installed (no {', '.join(missing)}): "
                    "pip install -e '.[docs]'")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO_ROOT, env=dict(os.environ, NO_MKDOCS_2_WARNING="1"), capture_output=True,
        text=True, timeout=600, check=False)
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + result.stderr[-5000:]
    # The API reference is rendered from the docstrings (mkdocstrings), not left as ":::".
    for page, names in {"api/parser": ("ParseResult", "parse_each", "Raises"),
                        "api/sentences": ("SentenceError", "TOO_MANY_PIECES", "read_lines"),
                        "api/client": ("ServingError", "predict")}.items():
        html = (site / page / "index.html").read_text(encoding="utf-8")
        assert ":::" not in html, page
        for name in names:
            assert name in html, f"{page}: {name} not rendered"


def test_readme_is_a_front_page():
    with open(README, encoding="utf-8") as f:
        count = sum(1 for _ in f)
    assert count <= MAX_README_LINES, f"README.md has {count} lines (at most {MAX_README_LINES})"


def test_no_run_logs_in_docs():
    found = []
    for path in _doc_files():
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if CLOCK_TIME.search(line):
                    found.append(f"{os.path.relpath(path, REPO_ROOT)}:{number}: {line.strip()}")
    assert not found, "clock times (run logs) in the docs:\n" + "\n".join(found)


def test_readme_links_exist():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    broken = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        if not os.path.exists(os.path.join(REPO_ROOT, target)):
            broken.append(target)
    assert not broken, f"README.md links to missing files: {broken}"


@pytest.mark.slow
def test_commands_reference_is_current(tmp_path):
    """docs/reference/commands.md holds each command's --help as it is now."""
    written = tmp_path / "commands.md"
    result = subprocess.run([sys.executable, os.path.join(DOCS_DIR, "gen_commands.py"),
                             f"--output={written}"], cwd=REPO_ROOT, env=subprocess_env(),
                            capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(DOCS_DIR, "reference", "commands.md"), encoding="utf-8") as f:
        current = f.read()
    assert written.read_text(encoding="utf-8") == current, (
        "docs/reference/commands.md is out of date: run python docs/gen_commands.py")


# --------------------------------------------------------------------------------------
# The README's quick start


@dataclasses.dataclass
class Block:
    name: str
    language: str  # sh or python
    code: str
    shown: str | None  # the output the README shows after it, if any


_BLOCK = re.compile(r"<!-- quickstart: ([\w-]+) -->\s*\n```(\w+)\n(.*?)```[ \t]*\n"
                    r"(?:\s*```text\n(.*?)```)?", re.S)


def readme_blocks() -> dict[str, Block]:
    with open(README, encoding="utf-8") as f:
        text = f.read()
    return {match.group(1): Block(*match.groups()) for match in _BLOCK.finditer(text)}


SENTENCES = ["The cat sat on the mat .", "Hello !"]
SPACY_SENTENCE = "The time for action is now ."


def _leaves(tree: str, words: str, top: bool = True) -> None:
    """Asserts that tree is one bracketed tree (with a TOP root if top) over words."""
    from tetra_tf.trees import treebank

    parsed = treebank.parse_tree(tree)
    assert (parsed.label() == "TOP") == top, tree
    assert parsed.leaves() == words.split(), tree


def _trees(lines: list[str], sentences: list[str]) -> None:
    assert len(lines) == len(sentences), lines
    for line, sentence in zip(lines, sentences):
        _leaves(line, sentence)


def check_tree(lines: list[str]) -> None:
    _trees(lines, ["The cat sat on the mat ."])


def check_cli(lines: list[str]) -> None:
    _trees(lines, SENTENCES)


def check_python(lines: list[str]) -> None:
    assert len(lines) == 3, lines
    _leaves(lines[0], SENTENCES[0])
    score, tree = lines[1].split(" ", 1)
    assert re.fullmatch(r"-?\d+\.\d{4}", score) and float(score) <= 0, lines[1]
    _leaves(tree, SENTENCES[1])
    assert lines[2] == "empty: no words", lines[2]


def check_rest(lines: list[str]) -> None:
    _trees(lines, SENTENCES)


def check_grpc(lines: list[str]) -> None:
    _trees(lines, SENTENCES[:1])


def check_spacy(lines: list[str]) -> None:
    assert len(lines) == 2, lines
    _leaves(lines[0], SPACY_SENTENCE, top=False)
    labels, children = re.fullmatch(r"(\(.*\)) (\[.*\])", lines[1]).groups()
    labels, children = ast.literal_eval(labels), ast.literal_eval(children)
    assert isinstance(labels, tuple) and all(isinstance(label, str) for label in labels)
    assert " ".join(children).replace(" .", ".") == SPACY_SENTENCE.replace(" .", "."), children


def check_bulk(summary: str):
    def check(lines: list[str]) -> None:
        assert any(re.match(summary, line) for line in lines), (summary, lines)
        _trees(lines[-2:], SENTENCES)

    return check


CHECKS = {
    "tree": check_tree,
    "cli": check_cli,
    "python": check_python,
    "rest": check_rest,
    "grpc": check_grpc,
    "spacy": check_spacy,
    "beam": check_bulk(r"2 of 2 lines parsed"),
    "spark": check_bulk(r"2 of 2 lines parsed"),
}
# Blocks that set things up and show no output.
SETUP_BLOCKS = ("input", "serve")
EXTRAS = {"rest": "serving", "grpc": "serving", "serve": "serving", "spacy": "spacy",
          "beam": "beam", "spark": "spark"}


def test_every_quickstart_block_is_checked():
    blocks = readme_blocks()
    assert set(blocks) == set(CHECKS) | set(SETUP_BLOCKS), sorted(blocks)
    for name in CHECKS:
        assert blocks[name].shown, f"the README shows no output for quickstart {name}"


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_readme_shows_the_promised_format(name):
    """The output the README shows passes the same check as the real output."""
    block = readme_blocks()[name]
    CHECKS[name](block.shown.strip().splitlines())


@dataclasses.dataclass
class Place:
    directory: str
    rest_port: str
    grpc_port: str

    def command(self, code: str) -> str:
        """A block's code as it runs here: free ports, the repo's scripts."""
        code = code.replace(EXAMPLE_REST_PORT, self.rest_port)
        code = code.replace(EXAMPLE_GRPC_PORT, self.grpc_port)
        return re.sub(r"\bpython (serving|tools)/", rf"python {REPO_ROOT}/\1/", code)

    def env(self) -> dict[str, str]:
        env = subprocess_env()
        env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
        env["COLUMNS"] = "100"
        env["TETRA_TF_HOME"] = os.path.join(self.directory, "home")  # a first run's cache
        return env


def _run(place: Place, block: Block, timeout: float = 600) -> list[str]:
    command = place.command(block.code)
    print(f"quickstart {block.name}: ran\n{command}")
    if block.language == "python":
        argv = [sys.executable, "-c", command]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", command]
    result = subprocess.run(argv, cwd=place.directory, env=place.env(), capture_output=True,
                            text=True, timeout=timeout, check=False)
    assert result.returncode == 0, (f"quickstart {block.name} failed: {command}\n"
                                    f"stdout: {result.stdout[-2000:]}\n"
                                    f"stderr: {result.stderr[-3000:]}")
    return result.stdout.strip().splitlines()


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Place:
    """A working directory with the input block run in it, free ports."""
    directory = str(tmp_path_factory.mktemp("quickstart"))
    here = Place(directory, str(free_port()), str(free_port()))
    _run(here, readme_blocks()["input"])
    return here


def _require_extra(name: str) -> None:
    from tetra_tf import extras

    extra = EXTRAS.get(name)
    if extra and extras.missing(extra):
        pytest.skip(f"the [{extra}] extra is not installed: quickstart {name} not run")
    if name == "spark" and shutil.which("java") is None:
        pytest.skip("no Java runtime (Spark needs Java 17+): quickstart spark not run")


@pytest.fixture(scope="module")
def server(place):
    """The serve block's server, running until the module's tests are done."""
    _require_extra("serve")
    command = place.command(readme_blocks()["serve"].code).strip()
    assert command.endswith("&"), command
    command = command[:-1].strip()
    print(f"quickstart serve: started\n{command}")
    log_path = os.path.join(place.directory, "server.log")
    with open(log_path, "wb") as log:
        process = subprocess.Popen(["bash", "-c", "exec " + command], cwd=place.directory,
                                   env=place.env(), stdout=log, stderr=subprocess.STDOUT)
    with served_until_done(process, place.rest_port, log_path) as running:
        yield running


@pytest.mark.parametrize("name", ["tree", "cli", "python", "spacy", "beam", "spark"])
def test_quickstart(name, place):
    _require_extra(name)
    CHECKS[name](_run(place, readme_blocks()[name]))


@pytest.mark.parametrize("name", ["rest", "grpc"])
def test_quickstart_server(name, place, server):  # pylint: disable=unused-argument
    CHECKS[name](_run(place, readme_blocks()[name]))
