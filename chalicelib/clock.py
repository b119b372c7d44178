"""Time as an injectable dependency: the decision core never reads the wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Clock = Callable[[], int]
"""Returns the current time in epoch milliseconds."""


def system_clock() -> int:
    """Return the wall-clock time in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def iso_utc(epoch_ms: int) -> str:
    """Format epoch milliseconds as ISO-8601 UTC with a trailing Z, to the second."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return f"{moment.year:04d}-" + moment.strftime("%m-%dT%H:%M:%SZ")  # %Y does not pad


def parse_iso_utc(text: str) -> int:
    """Parse an ISO-8601 timestamp (Z or offset) into epoch milliseconds.

    Raises:
        ValueError: the text is not an ISO-8601 timestamp with a time zone.
    """
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("timestamp has no time zone")
    return int(parsed.timestamp() * 1000)


class Expiring(Generic[K, V]):
    """Values kept per key for `keep_ms` by the clock, in this container; all forgotten at
    once past `most` keys, if given (memory stays bounded)."""

    def __init__(self, clock: Clock, keep_ms: int, most: int | None = None) -> None:
        self._clock = clock
        self._keep_ms = keep_ms
        self._most = most
        self._kept: dict[K, tuple[int, V]] = {}

    def get(self, key: K, load: Callable[[K], V]) -> V:
        """The value kept for `key` while it is fresh, else `load`'s, kept from now.

        Raises:
            Whatever `load` raises (nothing is kept then).
        """
        now = self._clock()
        kept = self._kept.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        value = load(key)
        self._keep(key, value, now)
        return value

    def put(self, key: K, value: V) -> None:
        """Keep `value` for `key` from now."""
        self._keep(key, value, self._clock())

    def drop(self, key: K) -> None:
        self._kept.pop(key, None)

    def _keep(self, key: K, value: V, now: int) -> None:
        if self._most is not None and len(self._kept) > self._most:
            self._kept.clear()
        self._kept[key] = (now + self._keep_ms, value)
