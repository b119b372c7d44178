"""Writes after the answer (`check.afterwards`): every check that asks about a write made
in its time is told of it, a write no worker could take is made at once, never left
counted as pending, and the runaway flush after an answer keeps to the check's deadline."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

from chalicelib.check import afterwards, parallel
from chalicelib.check.afterwards import DONE_FRESH_S, Afterwards
from chalicelib.check.deadline import Deadline, answering_by
from chalicelib.check.runaway import RunawayLoops
from chalicelib.quota.core import Attempt, SessionKey


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_every_copy_that_asks_in_its_time_reads_the_store_again() -> None:
    """Defect class (review): the hint that a write landed was one-shot, so of two copies
    that both read the store just before the admission landed, the second was told nothing
    and answered from its stale read (409, in progress)."""
    clock = Clock()
    writes = Afterwards(clock)
    afterwards.inline(True)
    try:
        writes.later("call", lambda: None, "admitting a call")
    finally:
        afterwards.inline(False)
    assert writes.wait_for("call", 0)
    assert writes.wait_for("call", 0)  # the second copy is told too
    clock.now += DONE_FRESH_S + 0.1
    assert not writes.wait_for("call", 0)  # long landed: what it read is current
    assert not writes.wait_for("other", 0)


def test_a_write_no_worker_can_take_is_made_before_the_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Defect class (review): the write was counted pending before it was handed to a
    worker; a worker that could not start left it pending for good, and every Lambda
    invocation after it was held to its deadline."""
    monkeypatch.setattr(parallel, "_WORKERS", parallel._Workers())  # none idle

    def cannot_start(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", cannot_start)
    done: list[str] = []
    Afterwards().later("k", lambda: done.append("written"), "a write")
    monkeypatch.undo()
    assert done == ["written"]
    assert afterwards.settle_all(1)


def test_records_held_back_are_flushed_only_while_the_checks_deadline_allows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Defect class (review): the flush after the answer of what runaway loops held back
    took one store request per due session with no deadline, and the Lambda hold waited
    for all of them. Past the deadline it stops; what is left is due at the next check."""
    loops = RunawayLoops(keep_calls=5, cache_ms=2000)
    sessions = [SessionKey("t", f"s{n}") for n in range(3)]
    loops._due.update(dict.fromkeys(sessions, 0))
    flushed: list[SessionKey] = []
    clock = Clock()

    def flush(key: SessionKey, store: object, escalation: object) -> None:
        flushed.append(key)
        clock.now += 0.1  # each flush is one store request

    monkeypatch.setattr(loops, "flush", flush)
    attempt = cast("Attempt", SimpleNamespace(real_ms=10_000, session=SessionKey("t", "own")))
    nothing = cast("Any", None)
    with answering_by(Deadline(at_s=clock.now + 0.25, step_s=0.1, clock=clock)):
        loops.flush_due(attempt, nothing, nothing, lambda work: work())
        assert flushed == sessions[:2]  # two requests fit before the deadline
        loops.flush_due(attempt, nothing, nothing, lambda work: work())
        assert flushed == sessions[:2]  # none in what is left of this check's time
    loops.flush_due(attempt, nothing, nothing, lambda work: work())
    assert flushed == sessions  # the next check flushes the rest
