"""The walk of one check through the code (issue 30): how many of our functions a check
calls ("stops"), in how many of our files, and how often it goes back to a file it had
already left ("returns") - a reader following the check opens that file again.

The service is built as the app builds it for the memory backend (`wiring.Container`),
warmed by one check of each kind, then one more of each kind is traced from the function
the `/v1/check` route calls (`binding.check_as`) with a profile hook on every thread
(independent store requests run on worker threads).

    .venv/bin/python -m bench.check_walk

A stop is a call (or a generator's resumption) of a function whose code is in
`chalicelib/` (dataclass-generated `<string>` code, the standard library and third-party
code are not ours and are skipped). A return is a stop in a file visited before, but not
the file of the stop just before it in the same thread.
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "CRITICAL")  # before chalicelib builds its Logger

from chalicelib.auth.tokens import Identity
from chalicelib.check.binding import check_as
from chalicelib.check.requests import parse_check
from chalicelib.quota.answers import Allowed, Decision
from chalicelib.settings import Settings
from chalicelib.wiring import Container

PACKAGE = Path(__file__).resolve().parent.parent / "chalicelib"
TENANT = "bench"
SERVER = Identity(TENANT, "server", "bench-server")
WRITE_LIMIT = 15  # the default policy's per-session limit of the write category


@dataclass(frozen=True)
class Walk:
    """One traced check: its stops in order, each as (thread, file, function)."""

    stops: tuple[tuple[int, str, str], ...]

    @property
    def functions(self) -> int:
        return len({(path, name) for _, path, name in self.stops})

    @property
    def files(self) -> int:
        return len({path for _, path, _ in self.stops})

    @property
    def returns(self) -> int:
        seen: set[str] = set()
        last: dict[int, str] = {}
        back = 0
        for thread, path, _ in self.stops:
            if path in seen and last.get(thread) != path:
                back += 1
            seen.add(path)
            last[thread] = path
        return back

    def line(self, kind: str) -> str:
        stops = len(self.stops)
        share = 100 * self.returns / stops if stops else 0.0
        return (
            f"{kind:<14} {stops:>4} stops in {self.files:>2} files "
            f"({self.functions:>3} distinct functions), "
            f"returns to a file already left {self.returns:>3} times ({share:.0f} %)"
        )


class Tracer:
    """A profile hook on every thread that records our functions' calls while on."""

    def __init__(self) -> None:
        self._on = False
        self._lock = threading.Lock()
        self._stops: list[tuple[int, str, str]] = []
        self._ours: dict[str, str | None] = {}

    def _file(self, filename: str) -> str | None:
        found = self._ours.get(filename, "")
        if found == "":
            path = Path(filename)
            found = str(path.relative_to(PACKAGE.parent)) if path.is_relative_to(PACKAGE) else None
            self._ours[filename] = found
        return found

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if not self._on or event != "call":
            return
        path = self._file(frame.f_code.co_filename)
        if path is not None:
            with self._lock:
                self._stops.append((threading.get_ident(), path, frame.f_code.co_qualname))

    def install(self) -> None:
        """On this thread and every thread started after (the check's workers)."""
        sys.setprofile(self.hook)
        threading.setprofile(self.hook)

    @contextmanager
    def recording(self) -> Iterator[list[tuple[int, str, str]]]:
        stops: list[tuple[int, str, str]] = []
        with self._lock:
            self._stops, self._on = stops, True
        try:
            yield stops
        finally:
            with self._lock:
                self._on = False


def container() -> Container:
    """The service on the memory backend, as `QUOTA_BACKEND=memory` builds it."""
    settings = replace(Settings.from_env({}), backend="memory", dev_tokens=True)
    return Container(settings=settings)


def checker(built: Container) -> Callable[[str, str, int], Decision]:
    """Checks one call of `tool` in `session` as the client sends it: a call id and the
    arguments' digest (made distinct by `n`, so that no repeat rule refuses it)."""

    def check(session: str, tool: str, n: int) -> Decision:
        digest = hashlib.sha256(str(n).encode()).hexdigest()
        body = {"session_id": session, "tool": tool, "call_id": f"{session}-{n}"}
        body["args_digest"] = digest
        return check_as(SERVER, parse_check(body, built.policy), built.checks)

    return check


def measure() -> dict[str, Walk]:
    """One traced check of each kind, each after an untraced one of the same kind."""
    tracer = Tracer()
    tracer.install()
    built = container()
    check = checker(built)

    def spend(session: str) -> None:
        for n in range(WRITE_LIMIT):
            check(session, "delete_article", n)

    # The kind, what readies a session for it (untraced), its tool, what it must answer.
    kinds: list[tuple[str, Callable[[str], None], str, bool]] = [
        ("allowed read", lambda _: None, "search_articles", True),
        ("allowed write", lambda _: None, "delete_article", True),
        ("refused write", spend, "delete_article", False),
    ]
    walks: dict[str, Walk] = {}
    for kind, ready, tool, allowed in kinds:
        for session in (f"{kind.replace(' ', '-')}-warm", f"{kind.replace(' ', '-')}-traced"):
            ready(session)
            with tracer.recording() as stops:
                decision = check(session, tool, WRITE_LIMIT)
            if isinstance(decision, Allowed) != allowed:
                raise SystemExit(f"{kind}: the check answered {decision!r}")
            walks[kind] = Walk(tuple(stops))  # the traced one replaces the warm one
    sys.setprofile(None)
    threading.setprofile(None)
    return walks


def main() -> None:
    with redirect_stdout(io.StringIO()):  # the refusals' metric lines
        walks = measure()
    for kind, walk in walks.items():
        print(walk.line(kind))


if __name__ == "__main__":
    main()
