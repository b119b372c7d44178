"""Independent store requests of one check sent at once: one round trip for all."""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar, cast

_T = TypeVar("_T")


class _Workers:
    """Daemon threads kept for the container's life, started only when none is idle:
    starting a thread per check was most of a write's CPU on a fast store. Daemons, not
    a pool's: nothing is left for the interpreter to join at exit (a pool's atexit join
    is what a Ctrl-C of `make run` used to interrupt)."""

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[tuple[Callable[[], None], Callable[[], None]]]
        self._tasks = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, task: Callable[[], None], then: Callable[[], None]) -> None:
        """Run `task` on an idle worker, or on a new one (never waits for a busy one,
        so a step that runs steps of its own cannot deadlock); `then` once the worker
        is idle again (so the next check finds it so).

        Raises:
            RuntimeError: no worker was idle and none could start (the task is not run).
        """
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        if start:  # the new worker's first task is this one: none is left queued
            thread = threading.Thread(
                target=self._work, args=((task, then),), daemon=True, name="quota-step"
            )
            thread.start()
        else:
            self._tasks.put((task, then))

    def _work(self, first: tuple[Callable[[], None], Callable[[], None]]) -> None:
        task, then = first
        while True:
            try:
                task()
            finally:
                with self._lock:
                    self._idle += 1
                then()
            task, then = self._tasks.get()


_WORKERS = _Workers()


def _nothing() -> None:
    return None


def submit(task: Callable[[], None]) -> None:
    """Run `task` on the container's workers, answering nothing (`check.afterwards`)."""
    _WORKERS.submit(task, _nothing)


def in_parallel(calls: Sequence[Callable[[], _T]]) -> list[_T]:
    """Run independent store requests at once (one round trip for all); the first
    exception is raised once every call has finished, so none is left half-seen."""
    results = settled(calls)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return cast("list[_T]", results)  # no call raised: each slot holds its result


def settled(calls: Sequence[Callable[[], _T]]) -> list[_T | BaseException]:
    """Run independent store requests at once; each one's result, or what it raised.
    Each runs in a copy of the caller's context: the check's deadline (`check.deadline`)
    bounds what a call does on a worker as it does on the caller's thread."""
    if len(calls) <= 1:
        return [_outcome(call) for call in calls]
    results: list[_T | BaseException | None] = [None] * len(calls)
    done = threading.Semaphore(0)

    def run(index: int) -> None:
        results[index] = _outcome(calls[index])

    for i in range(1, len(calls)):
        _WORKERS.submit(partial(contextvars.copy_context().run, run, i), done.release)
    run(0)
    for _ in range(1, len(calls)):
        done.acquire()
    return cast("list[_T | BaseException]", results)  # every call ran


def _outcome(call: Callable[[], _T]) -> _T | BaseException:
    try:
        return call()
    except BaseException as exc:  # handed to the caller
        return exc
