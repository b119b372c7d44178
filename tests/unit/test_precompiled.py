"""Dataclass methods compiled ahead (`chalicelib.precompiled`): a class whose methods'
source the file holds is built from it, exactly as `dataclasses` builds it; any other is
compiled as before, so the file can be stale, never wrong."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chalicelib import precompiled

SOURCE = textwrap.dedent(
    """
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class Call:
        tool: str
        units: int = 1
        tags: tuple[str, ...] = field(default_factory=tuple)

    @dataclass
    class Counter:
        n: int = 0
    """
)


@pytest.fixture
def restored() -> Iterator[None]:
    yield
    if "exec" in vars(dataclasses):
        del dataclasses.exec  # type: ignore[attr-defined]
    precompiled._CODE.clear()
    for name in [n for n in sys.modules if n.startswith("precompiled_probe")]:
        del sys.modules[name]


def _behaviour(module: Any) -> tuple[object, ...]:
    call = module.Call("delete_tag", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.units = 3
    counter = module.Counter()
    counter.n += 1
    return (
        repr(call),
        call == module.Call("delete_tag", 2, ()),
        hash(call) == hash(module.Call("delete_tag", 2)),
        repr(counter),
        module.Call.__init__.__annotations__,
        module.Call.__init__.__qualname__,
        dataclasses.replace(call, units=5).units,
    )


def test_no_file_or_a_broken_one_installs_nothing(tmp_path: Path, restored: None) -> None:
    assert not precompiled.install(tmp_path / "missing.bin")
    (tmp_path / "broken.bin").write_bytes(b"not marshal")
    assert not precompiled.install(tmp_path / "broken.bin")
    assert "exec" not in vars(dataclasses)


def test_found_and_compiled_are_counted_and_alike(tmp_path: Path, restored: None) -> None:
    package = tmp_path / "precompiled_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(SOURCE)
    sys.path.insert(0, str(tmp_path))
    try:
        import precompiled_probe_pkg as plain  # type: ignore[import-not-found]  # noqa: PLC0415

        as_dataclasses_builds = _behaviour(plain)
        sys.modules.pop("precompiled_probe_pkg")
        count, failed = precompiled.write(
            ["precompiled_probe_pkg", "precompiled_probe_missing"], tmp_path / "d.bin"
        )
        assert failed == ["precompiled_probe_missing"]
        assert count >= 2  # the methods' sources: one per class or one per method
        assert _behaviour(sys.modules.pop("precompiled_probe_pkg")) == as_dataclasses_builds

        assert precompiled.install(tmp_path / "d.bin")
        before = dict(precompiled.USED)
        import precompiled_probe_pkg  # noqa: PLC0415

        assert precompiled.USED["found"] == before["found"] + count  # all from the file
        assert precompiled.USED["compiled"] == before["compiled"]
        assert _behaviour(precompiled_probe_pkg) == as_dataclasses_builds

        changed_source = SOURCE.replace("units: int = 1", "units: int = 4\n    note: str = ''")
        (package / "__init__.py").write_text(changed_source)
        sys.modules.pop("precompiled_probe_pkg")
        compiled = precompiled.USED["compiled"]
        import precompiled_probe_pkg as changed  # noqa: PLC0415

        assert precompiled.USED["compiled"] > compiled  # Call's methods changed: stale
        assert changed.Call("t", note="n") == changed.Call("t", 4, "n", ())  # its own source
    finally:
        sys.path.remove(str(tmp_path))
