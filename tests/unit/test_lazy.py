"""chalicelib.lazy: a module named now, imported on its first attribute access; a first
request's collector paused."""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from chalicelib.lazy import LazyModule, collector_paused, lazy_module, preload


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


def test_preload_imports_what_a_stand_in_names_and_leaves_real_modules_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    stand_in = lazy_module("colorsys")

    preload(stand_in, gc)

    assert "colorsys" in sys.modules
    assert "not imported yet" not in repr(stand_in)


def test_the_collector_is_paused_inside_then_as_it_was_and_what_lived_frozen() -> None:
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            with collector_paused():
                assert not gc.isenabled()
                kept = [object() for _ in range(10)]
            assert gc.isenabled() is enabled
            assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()
