"""The package layout holds (docs/ARCHITECTURE.md): one-way layers, no import cycles, lazy imports
only with a stated reason, the planner's doors into the performance model, torch only in
`perfmodel.bench`.

The import graph is read with `ast` (nothing is imported), so a cycle is caught even where Python
would tolerate it at run time. Imports under `if TYPE_CHECKING:` are type annotations only and are
not edges. Each rule is also run on a small planted tree to show that the scan can fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("perfmodel", "planner")
MAX_TOP_MODULES = 8
"""Modules allowed directly in `perfmodel/` and in `planner/` (the rest live in subpackages)."""
PLANNER_DOORS = frozenset({"perfmodel.tables", "perfmodel.facts", "perfmodel.spec.formulas",
                           "perfmodel.spec.errors", "perfmodel.costs.power",
                           "perfmodel.progress"})
"""What the planner (outside its CLI, which fronts both packages) may import of perfmodel."""
LAZY_MARK = "# lazy:"


@dataclass(frozen=True, slots=True)
class Import:
    """One import statement of a module."""

    module: str
    """The importing module."""
    target: str
    """The imported module (for `from a import b`, `a.b` when that is a module)."""
    line: int
    local: bool
    """Inside a function (run when called)."""
    reason: bool
    """Carries a `# lazy:` comment on one of its lines."""


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for package in PACKAGES
            for p in sorted((root / package).rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _walk(node: ast.AST, in_function: bool) -> Iterator[tuple[ast.AST, bool]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            continue
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk(child, True)
        else:
            yield child, in_function
            yield from _walk(child, in_function)


def _explained(lines: list[str], first: int, last: int) -> bool:
    """A `# lazy:` comment on the statement's lines or above it in its run of imports and
    comments (one comment explains a group of lazy imports)."""
    if any(LAZY_MARK in line for line in lines[first - 1: last]):
        return True
    i = first - 2
    while i >= 0:
        text = lines[i].strip()
        if LAZY_MARK in text:
            return True
        if not (text.startswith(("from ", "import ", "#", ")")) or text.endswith((",", "("))):
            return False
        i -= 1
    return False


def imports(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    source = path.read_text()
    lines = source.splitlines()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node, local in _walk(ast.parse(source), False):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        out += [Import(module=name, target=t, line=node.lineno, local=local,
                       reason=_explained(lines, node.lineno, node.end_lineno or node.lineno))
                for t in dict.fromkeys(targets)]
    return out


def all_imports(root: Path) -> list[Import]:
    known = modules(root)
    return [i for name, path in known.items() for i in imports(name, path, known)]


def cycles(edges: list[Import], nodes: set[str]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {n: set() for n in nodes}
    for e in edges:
        if e.target in nodes and e.target != e.module:
            graph[e.module].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _top(target: str) -> str:
    return target.split(".")[0]


def layering_violations(edges: list[Import]) -> list[str]:
    bad = []
    for e in edges:
        where = f"{e.module}:{e.line} imports {e.target}"
        inside_bench = e.module.startswith("perfmodel.bench")
        cli = e.module.startswith("planner.cli")
        if e.target.startswith("perfmodel.bench") and not (inside_bench or cli):
            bad.append(f"{where} (only perfmodel.bench and the CLI use the benchmarks)")
        if _top(e.target) == "torch" and not inside_bench:
            bad.append(f"{where} (torch belongs to perfmodel.bench, the [bench] extra)")
        if e.module.startswith("perfmodel") and _top(e.target) == "planner":
            bad.append(f"{where} (the performance model never imports the planner)")
        if (e.module.startswith("planner") and not cli and _top(e.target) == "perfmodel"
                and e.target not in PLANNER_DOORS):
            bad.append(f"{where} (the planner's doors are {', '.join(sorted(PLANNER_DOORS))})")
    return bad


def unexplained_lazy(edges: list[Import]) -> list[str]:
    return [f"{e.module}:{e.line} imports {e.target} inside a function without '{LAZY_MARK} "
            "<reason>'" for e in edges if e.local and not e.reason]


# ---- the shipped tree ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> list[Import]:
    return all_imports(ROOT)


def test_no_import_cycles(shipped: list[Import]) -> None:
    module_level = [e for e in shipped if not e.local]
    assert cycles(module_level, set(modules(ROOT))) == []
    # the function-local imports that remain are lazy for speed or torch, never to dodge a cycle
    assert cycles(shipped, set(modules(ROOT))) == []


def test_layers_are_one_way(shipped: list[Import]) -> None:
    assert layering_violations(shipped) == []


def test_every_lazy_import_says_why(shipped: list[Import]) -> None:
    assert unexplained_lazy(shipped) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_hold_few_modules_directly(package: str) -> None:
    top = sorted(p.name for p in (ROOT / package).glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_no_reexport_shims_and_no_loose_profile_reads() -> None:
    sources = {p: p.read_text() for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    assert [str(p) for p, s in sources.items() if "noqa: F401" in s] == []
    assert [str(p) for p, s in sources.items() if "getattr(profile" in s] == []


# ---- the scan itself can fail -------------------------------------------------------------------


def _plant(tmp_path: Path, files: dict[str, str]) -> list[Import]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in PACKAGES:
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    return all_imports(tmp_path)


def test_scan_finds_a_planted_cycle_and_bad_layers(tmp_path: Path) -> None:
    edges = _plant(tmp_path, {
        "perfmodel/a.py": "from perfmodel import b\n",
        "perfmodel/b.py": "from typing import TYPE_CHECKING\nimport perfmodel.a\n"
                          "if TYPE_CHECKING:\n    from planner import x\n",
        "perfmodel/c.py": "def f():\n    from perfmodel.a import g\n"
                          "def h():\n    # lazy: startup\n    import matplotlib\n",
        "planner/x.py": "from perfmodel.spec import catalog\nimport torch\n"
                        "from perfmodel.bench import model\n",
    })
    assert cycles(edges, set(modules(tmp_path))) == [["perfmodel.a", "perfmodel.b"]]
    # perfmodel.spec (not a door), torch, perfmodel.bench (twice: not a door, and bench-only);
    # the TYPE_CHECKING import of the planner is not an edge
    assert len(layering_violations(edges)) == 4
    assert unexplained_lazy(edges) == [
        "perfmodel.c:2 imports perfmodel.a inside a function without '# lazy: <reason>'"]
