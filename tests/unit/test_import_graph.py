"""The import graph of the `rackform` package: no circles, and every import points down the
layers that docs/architecture.md describes.

The graph is read from the source with `ast`, nothing is imported: every `import` and
`from ... import` anywhere in a module (inside functions too: an import deferred to dodge a
circle still closes it), `from package import name` counted as an import of the submodule
when `name` is one, and `importlib.import_module` / `__import__` with a literal name.

Python runs every enclosing package's `__init__.py` before a module of it, so each module also
imports its packages (`IMPLICIT`): a package whose `__init__.py` imports its own modules (to offer
their names at the package) closes a circle with each of them, and `import rackform.render.yamltext`
would load whatever the package's `__init__.py` loads. Such circles fail like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rackform"
ARCHITECTURE = ROOT / "docs/architecture.md"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("rackform", "rackform.paths", "rackform.installed_tools", "rackform.process_environment",
              "rackform.gc_pause", "rackform.collection", "rackform.role_code", "rackform.secrets")),
    ("model", ("rackform.model", "rackform.stages")),
    ("ipmi and mirror", ("rackform.ipmi", "rackform.mirror")),
    ("k8s", ("rackform.k8s",)),
    ("render", ("rackform.render",)),
    ("checks", ("rackform.checks",)),
    ("pipeline", ("rackform.pipeline",)),
    ("lab", ("rackform.lab",)),
    ("run", ("rackform.run",)),
    ("fabric", ("rackform.fabric",)),
    ("day2", ("rackform.day2",)),
    ("fleet", ("rackform.fleet",)),
    ("commands", ("rackform.commands", "rackform.site_scaffold", "rackform.secrets_cli")),
    ("cli", ("rackform.cli",)),
)
"""Bottom to top. A module may import its own layer and those below it; the circle test keeps
imports inside a layer honest. A module or package is placed by its longest listed prefix."""


def module_files() -> dict[str, Path]:
    """Module name -> file, for every module of the package (the shipped copies under
    rackform/_assets are data, not code of the package)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if "_assets" in parts:
            continue
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _known(name: str, modules: set[str]) -> str | None:
    """The module `name` is, or the nearest package above it that is one of ours."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def _imports(module: str, path: Path, modules: set[str]) -> dict[str, int]:
    """Modules of the package that `module` imports -> the line of the first such import."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: dict[str, int] = {}

    def add(name: str | None, line: int) -> None:
        if name and name.split(".")[0] == "rackform" and (target := _known(name, modules)) and target != module:
            found.setdefault(target, line)

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in modules else base, node.lineno)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", None)
            if called in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                add(node.args[0].value, node.lineno)
    return found


IMPLICIT = 0
"""The "line" of a module's import of its enclosing packages: no statement, Python's import system."""


def enclosing_packages(module: str, modules: set[str]) -> list[str]:
    """The packages Python imports before `module`, innermost first (rackform.render.project ->
    rackform.render, rackform)."""
    parts = module.split(".")
    return [name for end in range(len(parts) - 1, 0, -1) if (name := ".".join(parts[:end])) in modules]


def import_graph() -> tuple[dict[str, dict[str, int]], dict[str, Path]]:
    files = module_files()
    modules = set(files)
    graph = {}
    for module, path in sorted(files.items()):
        graph[module] = _imports(module, path, modules)
        for package in enclosing_packages(module, modules):
            graph[module].setdefault(package, IMPLICIT)
    return graph, files


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for number, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), number)
    return best[1] if best else None


@pytest.fixture(scope="module")
def graph():
    return import_graph()


def _where(files: dict[str, Path], module: str, line: int) -> str:
    return f"{files[module].relative_to(ROOT)}:{line}" if line != IMPLICIT else f"{files[module].relative_to(ROOT)}"


def _edge(files: dict[str, Path], module: str, target: str, line: int) -> str:
    if line == IMPLICIT:
        return f"{_where(files, module, line)}: {module} imports {target} (its package, run before it)"
    return f"{_where(files, module, line)}: {module} imports {target}"


def test_the_package_has_no_import_circle(graph):
    edges, files = graph
    report = []
    for component in circles(edges):
        members = set(component)
        report.append(f"circle of {len(component)} modules: {', '.join(component)}")
        report += [f"    {_edge(files, module, target, line)}"
                   for module in component for target, line in sorted(edges[module].items()) if target in members]
    assert not report, ("move what both sides need to the lower layer, and import a package's names from "
                        "its modules, not from its __init__.py (docs/architecture.md):\n" + "\n".join(report))


def test_every_import_points_down_the_layers(graph):
    edges, files = graph
    unplaced = sorted(module for module in edges if layer_of(module) is None)
    assert not unplaced, f"modules in no layer (add them to LAYERS and docs/architecture.md): {unplaced}"
    upward = [f"{_where(files, module, line)}: {module} ({LAYERS[layer_of(module)][0]}) imports {target} "
              f"({LAYERS[layer_of(target)][0]}), a layer above it"
              for module, targets in edges.items() for target, line in sorted(targets.items())
              if layer_of(target) > layer_of(module)]
    assert not upward, ("imports against the layer order (docs/architecture.md); move the shared thing down:\n"
                        + "\n".join(upward))


def test_the_architecture_page_lists_the_layers_in_order():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    positions = [text.find(f"**{name}**") for name, _prefixes in LAYERS]
    assert -1 not in positions, f"docs/architecture.md names no layer {LAYERS[positions.index(-1)][0]!r} (as **name**)"
    assert positions == sorted(positions), "docs/architecture.md lists the layers in another order than LAYERS"


def test_the_graph_sees_deferred_and_dynamic_imports(tmp_path):
    """The reading itself: an import inside a function, `from package import submodule`, a
    relative import and importlib with a literal name all count."""
    package = tmp_path / "rackform"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "sub/__init__.py", "sub/leaf.py", "sub/other.py", "top.py", "low.py"):
        (package / name).write_text("")
    (package / "top.py").write_text("def f():\n    from rackform.sub import leaf\n    import importlib\n"
                                    "    importlib.import_module('rackform.low')\n")
    (package / "sub" / "leaf.py").write_text("from . import other\nfrom ..top import f\n")
    modules = {"rackform", "rackform.sub", "rackform.sub.leaf", "rackform.sub.other", "rackform.top", "rackform.low"}

    assert _imports("rackform.top", package / "top.py", modules) == {"rackform.sub.leaf": 2, "rackform.low": 4}
    assert _imports("rackform.sub.leaf", package / "sub" / "leaf.py", modules) == {
        "rackform.sub.other": 1, "rackform.top": 2}
    assert circles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]


def test_a_package_that_offers_its_modules_names_is_a_circle(tmp_path, monkeypatch):
    """Python runs rackform/sub/__init__.py before rackform/sub/leaf.py: an `__init__.py` that
    imports its own modules (to re-export their names) closes a circle the source never spells
    out; a plain package, and one whose `__init__.py` imports only modules outside it, close none."""
    package = tmp_path / "rackform"
    (package / "sub").mkdir(parents=True)
    (package / "plain").mkdir()
    (package / "__init__.py").write_text("")
    (package / "plain" / "__init__.py").write_text('"""Nothing imported here."""\n')
    (package / "plain" / "leaf.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from rackform.low import x\n")
    (package / "sub" / "leaf.py").write_text("from rackform.plain.leaf import y\n")
    (package / "low.py").write_text("")
    monkeypatch.setitem(globals(), "PACKAGE", package)
    monkeypatch.setitem(globals(), "ROOT", tmp_path)

    edges, _files = import_graph()
    assert edges["rackform.sub.leaf"] == {"rackform.plain.leaf": 1, "rackform.sub": IMPLICIT, "rackform": IMPLICIT}
    assert circles(edges) == []

    (package / "sub" / "__init__.py").write_text("from rackform.sub.leaf import y\n")
    assert circles(import_graph()[0]) == [["rackform.sub", "rackform.sub.leaf"]]
