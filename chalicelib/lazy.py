"""Modules imported on their first attribute access.

The route modules (chalicelib/api/) name the modules they use without importing them in
the Lambda init phase: an init then costs Chalice and the route table, and the first
check imports what a check needs and nothing of the admin side (bench/cold_start.py
measures both).

The import itself is `importlib.import_module`, whose per-module locks make concurrent
first uses safe (`make run` serves requests on threads); importlib's own LazyLoader is
not thread-safe before Python 3.12.

A container's first request, which does those imports, runs with the cyclic garbage
collector paused (`collector_paused`).
"""

from __future__ import annotations

import gc
import importlib
from contextlib import contextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator


class LazyModule:
    """Stands for the module `name` and imports it on the first attribute read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._module or self._imported(), attribute)

    def _imported(self) -> ModuleType:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return self._module

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r}, {state}>"


def preload(*modules: Any) -> None:
    """Import now the modules these stand-ins stand for (real modules are left as they are)."""
    for module in modules:
        if isinstance(module, LazyModule):
            module._imported()


def lazy_module(name: str) -> Any:
    """A stand-in for the module `name`, imported when one of its attributes is first
    read (typed Any: the caller imports the real module for the type checker)."""
    return LazyModule(name)


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector, then freeze what was allocated meanwhile.

    Importing boto3, its service model and the check path allocates hundreds of thousands
    of objects that live as long as the container; each collection the allocations
    trigger walks them again, for nothing (about a tenth of a first check's CPU). Frozen
    (`gc.freeze`), they stay out of every later collection too.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
