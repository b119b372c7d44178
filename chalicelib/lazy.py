"""Modules imported on their first attribute access.

The route modules (chalicelib/api/) name the modules they use without importing them in
the Lambda init phase: an init then costs Chalice and the route table, and the first
check imports what a check needs and nothing of the admin side (bench/cold_start.py
measures both).

The import itself is `importlib.import_module`, whose per-module locks make concurrent
first uses safe (`make run` serves requests on threads); importlib's own LazyLoader is
not thread-safe before Python 3.12.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module `name` and imports it on the first attribute read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r}, {state}>"


def lazy_module(name: str) -> Any:
    """A stand-in for the module `name`, imported when one of its attributes is first
    read (typed Any: the caller imports the real module for the type checker)."""
    return LazyModule(name)
