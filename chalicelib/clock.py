"""Time as an injectable dependency: the decision core never reads the wall clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

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
