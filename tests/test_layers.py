"""The packages are layers: a module imports only from its own layer or the ones below, and no
import cycle exists (checked on the source, statically)."""

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "layoutsearch"
# lowest first; report and validation sit side by side
RANK = {
    "core": 0,
    "frameworks": 0,  # what each framework is and can express: read by core's rules and profiles
    "costs": 1,
    "export": 2,
    "search": 3,
    "report": 4,
    "validation": 4,
    "sweep": 5,
    "cli": 6,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The layoutsearch modules a file imports (at any depth of the file): `from P import m` names
    the module P.m when m is one, else P itself."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("layoutsearch")
        ):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                out.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("layoutsearch"))
    return out


def rank(module: str) -> int | None:
    parts = module.split(".")
    return RANK.get(parts[1]) if len(parts) > 1 else None


def graph() -> nx.DiGraph:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    g = nx.DiGraph()
    for name, path in files.items():
        g.add_node(name)
        for target in imports(path, set(files)):
            while target not in files and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in files and target != name:
                g.add_edge(name, target)
    return g


def test_no_module_imports_a_higher_layer():
    """core, frameworks < costs < export < search < report, validation < sweep < cli."""
    bad = [
        (a, b)
        for a, b in graph().edges
        if rank(a) is not None and rank(b) is not None and rank(b) > rank(a)
    ]
    assert bad == []


def test_no_import_cycle_between_modules():
    """Module-level import graph is acyclic (package __init__ re-exports excepted when they point down)."""
    g = graph()
    cycles = [c for c in nx.simple_cycles(g) if len(c) > 1]
    assert cycles == []


def test_every_module_sits_in_a_layer():
    """Each subpackage is one of the named layers (a new package must choose its place)."""
    subpackages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert subpackages <= set(RANK)
