"""The layers point one way: the core decides, storage translates, features sit above.

An import against the layers (outside `if TYPE_CHECKING:`) fails here, with the module
and the line, so a shortcut through the layers is seen when it is written, not in review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "chalicelib"

ALLOWED: dict[str, tuple[str, ...]] = {
    # The pure core: rules, facts and values. Nothing of ours but the clock.
    "quota": ("chalicelib.quota", "chalicelib.clock"),
    # The adapters: they know the core (and the table layout they translate to).
    "storage": ("chalicelib.storage", "chalicelib.quota", "chalicelib.clock", "chalicelib.schema"),
}
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "check": ("chalicelib.admin", "chalicelib.api"),
    "admin": ("chalicelib.api",),
}


def _runtime_imports(path: Path) -> list[tuple[int, str]]:
    """Every `chalicelib` module a file imports when it runs (TYPE_CHECKING blocks aside)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, name) for line, name in found if name.startswith("chalicelib")]


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def _violations(layer: str) -> list[str]:
    bad: list[str] = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for line, name in _runtime_imports(path):
            allowed = ALLOWED.get(layer)
            if (allowed is not None and not _within(name, allowed)) or _within(
                name, FORBIDDEN.get(layer, ())
            ):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return bad


@pytest.mark.parametrize("layer", sorted({*ALLOWED, *FORBIDDEN}))
def test_no_import_against_the_layers(layer: str) -> None:
    """Defect class: a lower layer reaching up (the core raising HTTP errors, storage
    importing admin's records, check importing admin) ties the layers in a knot."""
    assert _violations(layer) == []


def test_the_check_service_is_not_subclassed() -> None:
    """Defect class: behaviour added to the check by subclassing it (a second mechanism
    beside the listener) hides an effect from anyone reading the service."""
    subclasses = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).endswith("CheckService") for base in node.bases)
    ]
    assert subclasses == []


def test_storage_key_formats_live_in_storage() -> None:
    """Defect class: a table's key format spelled outside the adapters (an audit sort key
    built in admin) means a second place to change when the table changes."""
    outside = [
        f"{path.relative_to(ROOT)}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "storage" not in path.relative_to(PACKAGE).parts and ":013d}" in path.read_text()
    ]
    assert outside == []
