"""Which writes a budget's record has applied: the store's own retry of a write it
applied is the same write, not a second call.

A session's writes name the check that sent them (its last calls keep the ids). A
principal's or the tenant's budget is written by every session, so it keeps, instead, the
last sequence number of each writer: a writer is one thread of one container, which sends
one request at a time, each with a higher number than the last. A write applies only if
its writer's number on the record is lower; the resend of one that was applied (botocore's
retry after a lost answer) then fails its condition on its own number, and is known as
applied, not counted again. Numbers start from the clock's milliseconds, so a writer not
seen for `STALE_MS` is dropped by a later write that saw it: the record keeps the writers
of the last minutes, not every container that ever was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

STALE_MS = 10 * 60 * 1000  # a writer's retry comes within seconds; its entry lasts this
PER_MS = 1000  # sequence numbers per millisecond: a writer's, strictly increasing
DROPPED_PER_WRITE = 4  # stale writers one write removes (the expression stays small)


@dataclass(frozen=True)
class WriteId:
    """One write to a budget: its writer, and the writer's sequence number for it."""

    writer: str
    seq: int


def applied(writes: Mapping[str, int], write: WriteId) -> bool:
    """Whether a record whose writers stand at `writes` has applied `write`."""
    return writes.get(write.writer, -1) >= write.seq


def stale(writes: Mapping[str, int], now_ms: int, besides: str) -> tuple[str, ...]:
    """Writers a write at `now_ms` drops (not `besides`, its own): none seen lately."""
    cutoff = (now_ms - STALE_MS) * PER_MS
    old = sorted(w for w, seq in writes.items() if seq < cutoff and w != besides)
    return tuple(old[:DROPPED_PER_WRITE])


def given_back(write: WriteId) -> WriteId:
    """The write that gives back `write` if the record applied it (or marks it never to
    apply): the same writer's next number, which a resend of `write` then fails on."""
    return WriteId(write.writer, write.seq + 1)
