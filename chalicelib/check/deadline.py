"""A check's deadline: the service answers before its caller gives up, and issues no
store request it could not finish by then.

The client gives up at 5 s (its `deadline`); the service answers by `SERVICE_BUDGET_S`
after the request arrived, or earlier when the Lambda has less time left. A store request
is started only if it can end before the deadline (`step_s`: the longest one request may
take, retries included, from the store client's timeouts); otherwise the check stops with
a 503 and Retry-After, and what it would have given back is left to a repair
(`check.repairs`), never to a request that already answered.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from chalicelib.storage.ports import StoreUnavailable

# Inside the client's 5 s deadline, with room for the network and the gateway.
SERVICE_BUDGET_S = 4.0
# Kept back from the Lambda's remaining time, for the answer to be written.
LAMBDA_MARGIN_S = 0.3


class DeadlineReached(StoreUnavailable):
    """The check would not end before its deadline: answered 503 now."""


@dataclass(frozen=True)
class Deadline:
    """When a check must have answered (on `clock`, seconds), and the longest one store
    request may take."""

    at_s: float
    step_s: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def starting(
        cls,
        step_s: float,
        remaining_ms: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> Deadline:
        """A deadline from now: the service's budget, or the Lambda's remaining time less
        a margin if that is shorter."""
        budget = SERVICE_BUDGET_S
        if remaining_ms is not None:
            budget = min(budget, remaining_ms / 1000 - LAMBDA_MARGIN_S)
        return cls(clock() + budget, step_s, clock)

    def left_s(self) -> float:
        """Seconds until the deadline (negative past it)."""
        return self.at_s - self.clock()

    def allows_step(self) -> bool:
        """Whether one more store request can end before the deadline."""
        return self.left_s() >= self.step_s

    def ensure(self, doing: str) -> None:
        """Stop here if one more store request could not end before the deadline.

        Raises:
            DeadlineReached: it could not.
        """
        if not self.allows_step():
            raise DeadlineReached(doing, retry_after_seconds=1)


_CURRENT: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "check_deadline", default=None
)


@contextmanager
def answering_by(deadline: Deadline) -> Iterator[Deadline]:
    """The deadline of the check made inside this block (one request)."""
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)


def current() -> Deadline | None:
    """The deadline of the check being made, if one was set."""
    return _CURRENT.get()


def ensure(doing: str) -> None:
    """`Deadline.ensure` on the current deadline (nothing without one).

    Raises:
        DeadlineReached: one more store request could not end before it.
    """
    deadline = current()
    if deadline is not None:
        deadline.ensure(doing)


def allows_step() -> bool:
    """Whether one more store request can end before the current deadline (always
    without one)."""
    deadline = current()
    return deadline is None or deadline.allows_step()


def left_s() -> float:
    """Seconds left before the current deadline (the service's budget without one)."""
    deadline = current()
    return SERVICE_BUDGET_S if deadline is None else max(0.0, deadline.left_s())
