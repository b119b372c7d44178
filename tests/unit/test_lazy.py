"""chalicelib.lazy: a module named now, imported on its first attribute access."""

from __future__ import annotations

import sys
import threading

import pytest

from chalicelib.lazy import LazyModule, lazy_module


def test_a_lazy_module_is_imported_on_first_use_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "json.tool", raising=False)

    module = lazy_module("json.tool")
    assert isinstance(module, LazyModule)
    assert "json.tool" not in sys.modules

    assert callable(module.main)  # first use: the module is imported
    assert module.main is sys.modules["json.tool"].main


def test_concurrent_first_uses_all_see_the_whole_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "chalicelib.admin.requests", raising=False)
    module = lazy_module("chalicelib.admin.requests")
    start = threading.Barrier(8)
    seen: list[object] = []

    def use() -> None:
        start.wait()
        seen.append(module.parse_token)

    threads = [threading.Thread(target=use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(seen) == 8
    assert len(set(map(id, seen))) == 1


def test_a_missing_module_or_name_fails_on_first_use() -> None:
    with pytest.raises(ModuleNotFoundError, match=r"chalicelib\.no_such_module"):
        lazy_module("chalicelib.no_such_module").anything  # noqa: B018
    with pytest.raises(AttributeError, match="no_such_name"):
        lazy_module("chalicelib.clock").no_such_name  # noqa: B018
