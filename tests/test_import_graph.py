"""The project's imports run one way: no module of tetra_tf/ (nor serving/ or
tetra_tf_spacy.py) imports, however indirectly, a module that imports it back; and training
code selects Keras 2 before TensorFlow loads.

The graph is read from the source with `ast`, not by importing: every import statement
counts, at module level, inside a function (an import put off to dodge a circle is still
one) or under ``if TYPE_CHECKING:`` (a type hint that names a module above is a circle in
the design). tests/test_runtime.py checks, by importing them, that no way in loads
training code; tests/test_train_extra.py that training code gets Keras 2.
"""

from __future__ import annotations

import ast
import os

from conftest import REPO_ROOT

# What the graph holds: the package (its subpackages too), the deployment's scripts and
# spaCy's entry point.
SOURCES = ("tetra_tf", "serving", "tetra_tf_spacy.py")


def _module_name(relative_path: str) -> str:
    """tetra_tf/serving/rest.py → tetra_tf.serving.rest; a package's __init__.py → it."""
    name = relative_path[:-len(".py")].replace(os.sep, ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def module_files(root: str, sources=SOURCES) -> dict[str, str]:
    """Each module's dotted name → its file, for the sources under root."""
    files = {}
    for source in sources:
        path = os.path.join(root, source)
        if os.path.isfile(path):
            files[_module_name(source)] = path
            continue
        for folder, _, names in os.walk(path):
            for name in names:
                if name.endswith(".py"):
                    full = os.path.join(folder, name)
                    files[_module_name(os.path.relpath(full, root))] = full
    return files


def _imported_names(node: ast.AST, module: str, is_package: bool) -> list[str]:
    """The dotted names an import statement loads, one per imported name."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level − 1 packages
        package = module.split(".") if is_package else module.split(".")[:-1]
        package = package[:len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names]


def _known_module(name: str, files: dict[str, str]) -> str | None:
    """The module of the sources that importing name loads (its longest known prefix:
    `from tetra_tf.contract import sentences` loads tetra_tf.contract.sentences, `from tetra_tf import
    __version__` the package tetra_tf); None for another project's."""
    while name and name not in files:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: str, sources=SOURCES) -> dict[str, dict[str, int]]:
    """module → {module of the sources it imports: the line of its first import there}."""
    files = module_files(root, sources)
    graph: dict[str, dict[str, int]] = {}
    for module, path in sorted(files.items()):
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        is_package = os.path.basename(path) == "__init__.py"
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            # (Loading a module also runs its packages' __init__.py: every module does, so
            # that is no edge.)
            for name in _imported_names(node, module, is_package):
                target = _known_module(name, files)
                if target is not None and target != module:
                    edges[target] = min(edges.get(target, node.lineno), node.lineno)
        graph[module] = edges
    return graph


def _runs_on_import(statements: list[ast.stmt]):
    """The statements a module runs when imported, in order: its top level, and the
    bodies of top-level if/try/with blocks, but not ``if TYPE_CHECKING:``'s."""
    for statement in statements:
        if isinstance(statement, ast.If):
            if not (isinstance(statement.test, ast.Name) and statement.test.id == "TYPE_CHECKING"):
                yield from _runs_on_import(statement.body + statement.orelse)
        elif isinstance(statement, (ast.Try, ast.With)):
            yield from _runs_on_import(statement.body + getattr(statement, "handlers", [])
                                       + getattr(statement, "orelse", [])
                                       + getattr(statement, "finalbody", []))
        elif isinstance(statement, ast.ExceptHandler):
            yield from _runs_on_import(statement.body)
        else:
            yield statement


def import_time_imports(root: str, sources=SOURCES) -> dict[str, list[str]]:
    """module → what importing it imports, in order: modules of the sources, and other
    projects' top-level packages (``tensorflow``, ``official`` ...)."""
    files = module_files(root, sources)
    imports = {}
    for module, path in files.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        is_package = os.path.basename(path) == "__init__.py"
        names = []
        for node in _runs_on_import(tree.body):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for name in _imported_names(node, module, is_package):
                    names.append(_known_module(name, files) or name.split(".")[0])
        imports[module] = [name for name in names if name != "__future__"]
    return imports


def _reaches(imports: dict[str, list[str]], packages: tuple[str, ...]) -> set[str]:
    """The modules whose import loads one of these packages, themselves or through others."""
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for module, names in imports.items():
            if module not in found and any(n in packages or n in found for n in names):
                found.add(module)
                changed = True
    return found


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle of each strongly connected group of modules (Tarjan), written as
    ``module:line`` steps that come back to the first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(module: str) -> None:  # recursive: the graph is a few dozen modules deep
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in graph.get(module, {}):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_in(graph, group) for group in groups]


def _cycle_in(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest way from the group's first module back to it, inside the group."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    path.reverse()
                    steps = [f"{a}:{graph[a][b]}" for a, b in zip(path, path[1:] + [start])]
                    return steps + [start]
                if target in group and target not in came_from:
                    came_from[target] = module
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a group of 2+ always has one


def test_no_import_circles():
    found = cycles(import_graph(REPO_ROOT))
    assert not found, "import circles (module:line of the import → ...):\n" + "\n".join(
        " → ".join(cycle) for cycle in found)


# The layers, lowest first (docs/architecture.md draws them). A module imports its own
# folder's modules and lower layers' only; folders side by side in one layer stay apart.
LAYERS = (
    ("base", (("tetra_tf.errors", "tetra_tf.extras", "tetra_tf.cpu", "tetra_tf.cli",
               "tetra_tf.version", "tetra_tf.default_encoder", "tetra_tf.train_extra"),)),
    ("trees", (("tetra_tf.trees",),)),
    ("contract", (("tetra_tf.contract",),)),
    ("data, decode", (("tetra_tf.data",), ("tetra_tf.decode",))),
    ("runtime", (("tetra_tf.parser", "tetra_tf.packaged_models"),)),
    ("training", (("tetra_tf.training",),)),
    ("savedmodel", (("tetra_tf.savedmodel",),)),
    ("integrations", (("tetra_tf.integrations",),)),
    ("serving", (("tetra_tf.serving", "serving"),)),
    ("programs and the face", (("tetra_tf", "tetra_tf.parse", "tetra_tf.train", "tetra_tf.export",
                                "tetra_tf.beam_parse", "tetra_tf.spark_parse", "tetra_tf.evalb",
                                "tetra_tf.distillation", "tetra_tf.convert", "tetra_tf._moved",
                                "tetra_tf_spacy"),)),
)


def _in(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes
               if p != "tetra_tf" or module == "tetra_tf")


def place(module: str) -> tuple[int, int] | None:
    """(layer, folder within it) of a module; None if no layer holds it."""
    for rank, (_, folders) in enumerate(LAYERS):
        for folder, prefixes in enumerate(folders):
            if _in(module, prefixes):
                return rank, folder
    return None


def layer_breaks(graph: dict[str, dict[str, int]]) -> list[str]:
    """`module:line → target (layer → layer)` for each import of a higher layer, or of a
    sibling folder in the same layer."""
    breaks = []
    for module, edges in sorted(graph.items()):
        here = place(module)
        for target, line in sorted(edges.items()):
            there = place(target)
            if there[0] > here[0] or (there[0] == here[0] and there[1] != here[1]):
                breaks.append(f"{module}:{line} → {target} ({LAYERS[here[0]][0]} → "
                              f"{LAYERS[there[0]][0]})")
    return breaks


def test_every_module_has_a_layer():
    homeless = [module for module in import_graph(REPO_ROOT) if place(module) is None]
    assert not homeless, f"modules in no layer of LAYERS: {homeless}"


def test_imports_run_down_the_layers():
    found = layer_breaks(import_graph(REPO_ROOT))
    assert not found, "imports of a higher layer (module:line → target):\n" + "\n".join(found)


def test_a_layer_break_is_named():
    """An import up the layers, and one across sibling folders, are both found."""
    graph = {"tetra_tf.contract.sentences": {"tetra_tf.parser": 3},
             "tetra_tf.data.records": {"tetra_tf.decode.decoding": 7, "tetra_tf.trees.tags": 2},
             "tetra_tf.parser": {"tetra_tf.contract.sentences": 1}, "tetra_tf.decode.decoding": {},
             "tetra_tf.trees.tags": {}}
    assert layer_breaks(graph) == [
        "tetra_tf.contract.sentences:3 → tetra_tf.parser (contract → runtime)",
        "tetra_tf.data.records:7 → tetra_tf.decode.decoding (data, decode → data, decode)"]


def test_the_graph_sees_every_kind_of_import():
    """The reader finds imports at module level, inside functions and for type hints, of
    modules, of packages' names and across subpackages (else the test above could not fail)."""
    graph = import_graph(REPO_ROOT)
    assert {"tetra_tf.contract.sentences", "tetra_tf.contract.export_format",
            "tetra_tf.contract.parse_record"} <= set(graph["tetra_tf.parser"])  # module level
    assert "tetra_tf.parser" in graph["tetra_tf.parse"]          # inside a function
    assert "tetra_tf.parser" in graph["tetra_tf.integrations.beam"]           # if TYPE_CHECKING
    assert "tetra_tf.version" in graph["tetra_tf.training.model_card"]
    assert "tetra_tf.serving.main" in graph["serving.server"]    # the scripts, subpackages
    assert "tetra_tf.integrations.spacy_component" in graph["tetra_tf_spacy"]
    assert len(graph) >= 60


def test_a_circle_is_named_with_its_lines(tmp_path):
    """Two modules that import each other, one inside a function (as sentences and text
    did), and a relative import closing a second circle through a subpackage."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("import os\n\n\ndef f():\n    from pkg import a\n")
    (package / "c.py").write_text("from pkg.sub import d\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "d.py").write_text("from typing import TYPE_CHECKING\n"
                                          "if TYPE_CHECKING:\n    from .. import c\n")
    (package / "e.py").write_text("from pkg import a, c\n")  # on no circle
    found = cycles(import_graph(str(tmp_path), ("pkg",)))
    assert sorted(found) == [["pkg.a:1", "pkg.b:5", "pkg.a"],
                             ["pkg.c:1", "pkg.sub.d:3", "pkg.c"]]


# Packages whose import loads TensorFlow, and those that build with Keras 2 (tf-models).
TENSORFLOW_PACKAGES = ("tensorflow", "tensorflow_text", "tensorflow_hub", "tf_keras",
                       "official")
KERAS_2_PACKAGES = ("tf_keras", "official")
SWITCH = "tetra_tf.train_extra"


def test_training_code_selects_keras_2_before_tensorflow_loads():
    """Every module whose import loads tf_keras or tf-models imports tetra_tf.train_extra
    before anything that loads TensorFlow (or first loads TensorFlow through another such
    module), whichever of them a process imports first."""
    imports = import_time_imports(REPO_ROOT)
    loads_tensorflow = _reaches(imports, TENSORFLOW_PACKAGES)
    training = _reaches(imports, KERAS_2_PACKAGES) - {SWITCH}
    assert {"tetra_tf.train", "tetra_tf.export", "tetra_tf.training.model",
            "tetra_tf.training.model_card", "tetra_tf.training.mpnet_encoder"} <= training
    late = {}
    for module in sorted(training):
        first_tensorflow = next(i for i, name in enumerate(imports[module])
                                if name in TENSORFLOW_PACKAGES or name in loads_tensorflow)
        first = imports[module][first_tensorflow]
        if SWITCH not in imports[module][:first_tensorflow] and first not in training:
            late[module] = first
    assert not late, f"TensorFlow loaded before {SWITCH} (module: its first import that " \
        f"loads it): {late}"
    assert not _reaches(imports, (SWITCH,)) & {
        "tetra_tf", "tetra_tf.parser", "tetra_tf.serving.main", "tetra_tf.integrations.beam",
        "tetra_tf.integrations.spark", "tetra_tf.integrations.spacy_component"}

