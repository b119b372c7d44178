"""Dataclass methods compiled when the package is built, for a Lambda cold start.

`@dataclass` writes the source of each class's methods (`__init__`, `__eq__`, ...) and
compiles it as the class's module is imported: for the hundred classes a first check
loads, about 45 ms of compiling, most of what our cold start spends above a bare Chalice
app (bench/cold_start.py). `deploy/package.py` records that source for every class in the
package with the Lambda runtime's Python (`record`) and ships it compiled (`FILE`, beside
the modules' own bytecode); at start-up (`install`, from `chalicelib/__init__.py`) the
`dataclasses` module compiles through a lookup in it.

The key is the exact source text, and the code is compiled as `dataclasses` compiles it
(file name "<string>", no future flags inherited): a class whose methods' source changed
is not found and is compiled as before, so the file can be stale, never wrong. Without
the file (a checkout, the tests), nothing is installed.
"""

import dataclasses
import importlib
import marshal
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FILE = Path(__file__).parent / "__pycache__" / f"dataclasses.{sys.implementation.cache_tag}.bin"

_CODE: dict[str, bytes] = {}
# Since `install`: methods found in the file, and compiled at start-up (not in it).
USED = {"found": 0, "compiled": 0}


def _compiled(source: str) -> Any:
    return compile(source, "<string>", "exec", dont_inherit=True)


def _exec(source: Any, globals_: dict[str, Any], locals_: Any = None) -> None:
    """`exec` as `dataclasses` calls it, from the compiled code when the file has it."""
    if not isinstance(source, str):
        exec(source, globals_, locals_)  # noqa: S102
        return
    code = _CODE.get(source)
    USED["found" if code is not None else "compiled"] += 1
    # Our own package's file, trusted as its .pyc files are.
    compiled = marshal.loads(code) if code is not None else _compiled(source)  # noqa: S302
    exec(compiled, globals_, locals_)  # noqa: S102


def install(path: Path = FILE) -> bool:
    """Make `dataclasses` use the compiled methods in `path`; whether it had any."""
    try:
        code = marshal.loads(path.read_bytes())  # noqa: S302 (as above)
    except (OSError, EOFError, ValueError, TypeError):
        return False
    _CODE.update(code)
    dataclasses.exec = _exec  # type: ignore[attr-defined]  # the name its codegen calls
    return True


def record(modules: Iterable[str]) -> tuple[dict[str, bytes], list[str]]:
    """Import `modules` and return the methods' source `dataclasses` compiled meanwhile,
    each with its code (marshalled), and the modules that could not be imported."""
    seen: dict[str, bytes] = {}
    failed: list[str] = []

    def recording(source: Any, globals_: dict[str, Any], locals_: Any = None) -> None:
        code = _compiled(source)
        if isinstance(source, str):
            seen[source] = marshal.dumps(code)
        exec(code, globals_, locals_)  # noqa: S102

    dataclasses.exec = recording  # type: ignore[attr-defined]
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # a module that cannot load here is left out
                failed.append(name)
    finally:
        del dataclasses.exec  # type: ignore[attr-defined]
    return seen, failed


def write(modules: Iterable[str], path: Path = FILE) -> tuple[int, list[str]]:
    """`record` the modules into `path`; how many methods' sources, and what failed."""
    seen, failed = record(modules)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(marshal.dumps(seen))
    return len(seen), failed
