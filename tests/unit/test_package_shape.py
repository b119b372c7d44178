"""The shape issue 19 asks of chalicelib/: feature packages, no module over 500 lines,
at most 12 loose modules at the top, and no import cycle at import time."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "chalicelib"


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imported_at_import_time(path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of ours `path` imports when it is imported (not under TYPE_CHECKING, not
    inside a function: those are deferred on purpose)."""
    deps: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("chalicelib"):
                for alias in inner.names:
                    full = f"{inner.module}.{alias.name}"
                    deps.add(full if full in known else str(inner.module))
    return {d for d in deps if d in known}


def test_no_module_is_over_500_lines() -> None:
    long = {n: len(p.read_text().splitlines()) for n, p in modules().items()}
    assert {n: lines for n, lines in long.items() if lines > 500} == {}


def test_at_most_12_loose_modules_at_the_top() -> None:
    loose = [p.name for p in ROOT.glob("*.py") if p.name != "__init__.py"]
    assert len(loose) <= 12, loose


def test_no_import_cycle() -> None:
    known = modules()
    graph = {n: imported_at_import_time(p, known) - {n} for n, p in known.items()}
    cycles = []

    def walk(node: str, path: list[str]) -> None:
        for dep in graph[node]:
            if dep in path:
                cycles.append([*path[path.index(dep) :], dep])
            elif dep not in done:
                walk(dep, [*path, dep])
        done.add(node)

    done: set[str] = set()
    for name in graph:
        if name not in done:
            walk(name, [name])
    assert cycles == []
