"""The wider steps of a check run at once on threads the container keeps (issue 29,
part 3): one thread started per check was most of a write's CPU on a fast store."""

from __future__ import annotations

import contextvars
import threading
from functools import partial

import pytest

from chalicelib.check.parallel import in_parallel


def test_steps_at_once_reuse_their_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect class: recomputed per check. Every check with two wider budgets started
    (and joined) a new thread for its second step."""
    started = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    for i in range(50):
        calls = [partial(int, i), partial(int, i + 1), partial(int, i + 2)]
        assert in_parallel(calls) == [i, i + 1, i + 2]
    assert len(started) <= 2  # at most the two a check of three steps needs at once


def test_a_failed_step_is_raised_once_every_step_has_finished() -> None:
    finished = []

    def fails() -> int:
        raise RuntimeError("down")

    def slow() -> int:
        finished.append(1)
        return 1

    with pytest.raises(RuntimeError):
        in_parallel([fails, slow, slow])
    assert finished == [1, 1]


def test_a_step_on_a_worker_sees_the_check_s_deadline() -> None:
    """Defect class: a step sent at once ran on a worker thread without the check's
    deadline (a context variable), so what it did after a failure (give-backs over a
    throttle) ignored it: a frozen store's 503 came after 8 s, not within 4."""
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="none")
    marker.set("the check's")
    seen = in_parallel([marker.get, marker.get, marker.get])
    assert seen == ["the check's"] * 3
