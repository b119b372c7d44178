"""The narrow pair (`record_port.RecordStore`) in memory: records in a dict under one
lock, each write the core's rule evaluated (`Condition.holds`) and its change applied
(`changes.apply`). A session's or a budget's is this store and its codec, nothing more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import replace
from typing import Any, Generic, TypeVar

from chalicelib.quota.calls import gone_lives, without_counted
from chalicelib.quota.changes import Calls, Change, Field, Slot
from chalicelib.quota.core import (
    BudgetKey,
    BudgetSnapshot,
    CallRecord,
    SessionKey,
    SessionSnapshot,
    ended_repeats,
    fold_repeats,
    with_call,
)
from chalicelib.quota.facts import Condition
from chalicelib.storage.budgets import Budgets
from chalicelib.storage.memory.changes import Row, apply
from chalicelib.storage.record_port import Applied, Failed
from chalicelib.storage.sessions import Sessions

K = TypeVar("K", bound=Hashable)
R = TypeVar("R")

_SWEEP_EVERY = 1024  # writes between sweeps of expired records (DynamoDB's TTL, here)


class MemoryRecords(Generic[K, R]):
    """One kind of record in a dict: `decode` makes a row the core's snapshot; `keep`
    last calls are kept (sessions)."""

    def __init__(self, decode: Callable[[Row], R], keep: int = 0) -> None:
        self._decode = decode
        self._keep = max(1, keep)
        self._rows: dict[K, Row] = {}
        self._lock = threading.Lock()
        self._writes = 0

    def read(self, key: K) -> R | None:
        """The record as stored, or None."""
        with self._lock:
            row = self._rows.get(key)
            return None if row is None else self._decode(row)

    def write(
        self, key: K, change: Change, rule: Condition | None, doing: str, before: bool = False
    ) -> Applied[R] | Failed[R]:
        """Apply `change` if `rule` holds, under the lock."""
        del doing  # nothing here fails but the rule
        with self._lock:
            row = self._rows.get(key)
            old = None if row is None else self._decode(row)
            if rule is not None and not rule.holds(old):
                return Failed(old)
            if row is None:
                row = self._rows[key] = Row()
            if change.tidy_at is not None and isinstance(old, SessionSnapshot):
                ended = ended_repeats(old.repeats, change.tidy_at)
                change = change.tidied(ended, _gone(old, change.tidy_at))
            apply(row, change)
            if change.record is not None:
                self._add_call(row, change.record, change.calls)
            self._sweep(row.fields.get(Field.LAST_SEEN))
            return Applied(old if before else self._decode(row))

    def _add_call(self, row: Row, record: CallRecord, calls: Calls) -> None:
        # As on DynamoDB: a repeated refusal is folded into the last record, and the
        # record keeps the last `keep` entries.
        if calls is Calls.RESTART:
            row.calls = []
        elif calls is Calls.REPLACE:
            row.calls = without_counted(row.calls, record)
        row.calls = list(with_call(tuple(row.calls), record)[-self._keep :])

    def _sweep(self, now_ms: int | None) -> None:
        self._writes += 1
        if now_ms is None or self._writes % _SWEEP_EVERY:
            return
        for key in [
            k for k, row in self._rows.items() if row.fields.get(Field.EXPIRES, now_ms) < now_ms
        ]:
            del self._rows[key]


def _gone(seen: SessionSnapshot, now_ms: int) -> tuple[str, ...]:
    """The lives a counted call's write drops, as the session's last calls show them."""
    held = {r.call_id for r in seen.calls if r.allowed and not r.replay} | seen.held_call_ids
    return gone_lives(seen.lives, {key for key in held if key is not None}, now_ms)


def session(row: Row) -> SessionSnapshot:
    """A session's row as the core reads it."""
    m, f = row.maps, row.fields
    marks: dict[str, tuple[int, str | None]] = m[Slot.FIRST_REFUSALS]
    return SessionSnapshot(
        last_seen_ms=f.get(Field.LAST_SEEN, 0),
        started_ms=f.get(Field.STARTED, 0),
        counts=dict(m[Slot.COUNTS]),
        raised=dict(m[Slot.RAISED]),
        refused=dict(m[Slot.REFUSED]),
        refused_held=dict(m[Slot.HELD]),
        suspended=Field.SUSPENDED in f,
        suspended_reason=f.get(Field.SUSPENDED),
        principal=f.get(Field.PRINCIPAL),
        calls=fold_repeats([replace(c, principal=f.get(Field.PRINCIPAL)) for c in row.calls]),
        raised_until=dict(m[Slot.RAISED_UNTIL]),
        server=f.get(Field.SERVER),
        leased=dict(m[Slot.LEASED]),
        grants=dict(m[Slot.GRANTS]),
        first_refusals={c: mark[0] for c, mark in marks.items()},
        first_refused_by={c: mark[1] for c, mark in marks.items()},
        client=f.get(Field.CLIENT),
        repeats=dict(m[Slot.REPEATS]),
        allowed_before=dict(m[Slot.ALLOWED_BEFORE]),
        lives=dict(m[Slot.LIVES]),
    )


def budget(row: Row) -> BudgetSnapshot:
    """A budget's row as the core reads it: each category's count in its window."""
    m: Any = row.maps
    counts: dict[int, dict[str, int]] = {}
    for category, count in m[Slot.COUNTS].items():
        if category in m[Slot.WINDOWS]:
            counts.setdefault(m[Slot.WINDOWS][category], {})[category] = count
    return BudgetSnapshot(
        counts,
        dict(m[Slot.RAISED]),
        row.fields.get(Field.SUSPENDED),
        dict(m[Slot.STREAKS]),
        dict(m[Slot.LAST_REFUSALS]),
        dict(m[Slot.WRITES]),
        dict(m[Slot.MARKS]),
        dict(m[Slot.WINDOWS]),
    )


class MemoryCounters(Sessions):
    """The session counters port (`storage.sessions`) on sessions in memory."""

    def __init__(self, categories: Iterable[str] = (), keep_calls: int = 10) -> None:
        del categories  # a record in memory keeps any category
        super().__init__(MemoryRecords[SessionKey, SessionSnapshot](session, keep_calls))


class MemoryBudgets(Budgets):
    """The budgets port (`storage.budgets`) on budgets in memory."""

    def __init__(self) -> None:
        super().__init__(MemoryRecords[BudgetKey, BudgetSnapshot](budget))
