"""The core's changes (`quota.changes`) mean the same on every backend: random sequences of
changes, applied by the memory backend and rendered into UpdateItems on moto and dynalite,
leave the same record (a session's, a budget's). What a write changes is written once, in
the core; this proves the two translations of it agree."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.quota.changes import COUNTING, Change, Field, Slot
from chalicelib.quota.core import CallLife, CallState, ClientInfo
from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.budget_items import BUDGET
from chalicelib.storage.dynamodb.budget_items import snapshot_from_item as budget_snapshot
from chalicelib.storage.dynamodb.changes import SESSION, Layout, render_change
from chalicelib.storage.dynamodb.codec import snapshot_from_item as session_snapshot
from chalicelib.storage.dynamodb.codec import ttl
from chalicelib.storage.dynamodb.layout import PK
from chalicelib.storage.memory import records
from chalicelib.storage.memory.changes import Row, apply
from tests.support import Backend

CATEGORIES = ("read", "write", "admin")
REPEAT_KEYS = ("delete_tag|ab|600000", "delete_tag|cd|1200000")
T0 = 1_700_000_000_000


@dataclass(frozen=True)
class Kind:
    """A kind of record: its maps and fields, in memory and on DynamoDB."""

    name: str
    layout: Layout
    snapshot: Callable[[Row], Any]  # memory row -> snapshot
    decode: Callable[[Mapping[str, Any]], Any]  # DynamoDB item -> snapshot
    clocks: frozenset[Field]  # fields a record always has


SESSION_KIND = Kind(
    "session",
    SESSION,
    records.session,
    lambda item: replace(session_snapshot(item), calls=()),  # the calls are the adapters'
    frozenset({Field.LAST_SEEN, Field.STARTED}),
)
BUDGET_KIND = Kind(
    "budget",
    BUDGET,
    records.budget,
    budget_snapshot,
    frozenset(),
)


CALL_KEYS = ("rpc-1", "~AbCdEfGhIjKlMnO")
# Maps keyed by something else than a category: a change never clears them.
UNCLEARED = frozenset({Slot.REPEATS, Slot.LIVES})


def _keys(slot: Slot) -> tuple[str, ...]:
    if slot is Slot.LIVES:
        return CALL_KEYS
    return REPEAT_KEYS if slot is Slot.REPEATS else CATEGORIES


def _slot_value(slot: Slot) -> st.SearchStrategy[Any]:
    if slot is Slot.GRANTS:
        return st.sampled_from(["1700000000000.5", "1700000001000.3"])
    if slot is Slot.FIRST_REFUSALS:
        return st.tuples(st.integers(1, 300), st.sampled_from(["c1", "c2"]))
    if slot is Slot.MARKS:
        return st.tuples(st.integers(T0, T0 + 9), st.integers(1, 300))
    if slot is Slot.LIVES:
        return st.builds(
            CallLife,
            state=st.sampled_from(CallState),
            check_id=st.sampled_from(["aB3-_z", "Qq9x0w"]),
            binding=st.sampled_from(["0123456789abcdef", "fedcba9876543210"]),
            until_ms=st.integers(T0, T0 + 60_000),
            replays=st.integers(0, 3),
        )
    return st.integers(0, 500)


def _field_value(field: Field) -> st.SearchStrategy[Any]:
    if field is Field.CLIENT:
        return st.builds(
            ClientInfo,
            name=st.sampled_from(["claude-code", "cursor"]),
            version=st.sampled_from([None, "1.0"]),
        )
    if field in (Field.LAST_SEEN, Field.STARTED, Field.EXPIRES):
        return st.integers(T0, T0 + 10_000_000)
    return st.sampled_from(["alice", "inventory", "loop ran away"])


@st.composite
def changes(draw: st.DrawFn, kind: Kind) -> Change:
    """A valid change: each map entry written once, nothing added to a cleared map."""
    slots = list(kind.layout.prefixes)
    fields = list(kind.layout.fields)
    clear = frozenset(
        draw(st.sets(st.sampled_from([s for s in slots if s not in UNCLEARED]), max_size=2))
    )
    used: set[tuple[Slot, str]] = set()

    def entries(max_size: int) -> list[tuple[Slot, str]]:
        picked = draw(
            st.lists(
                st.sampled_from([(s, k) for s in slots for k in _keys(s)]),
                max_size=max_size,
                unique=True,
            )
        )
        fresh = [entry for entry in picked if entry not in used]
        used.update(fresh)
        return fresh

    adds = [
        (s, k, draw(st.integers(-3, 20))) for s, k in entries(3) if s in COUNTING and s not in clear
    ]
    puts = [(s, k, draw(_slot_value(s))) for s, k in entries(3)]
    drops = entries(2)
    bump: set[Field] = set()  # no field of these records counts (a change may bump one)
    chosen = draw(st.sets(st.sampled_from(fields), max_size=4)) - bump
    unset = frozenset(draw(st.sets(st.sampled_from(fields), max_size=2))) - chosen - bump
    return Change(
        clear=clear,
        drop=tuple(drops),
        add=tuple(adds),
        put=tuple(puts),
        bump=tuple((f, draw(st.integers(1, 5))) for f in sorted(bump)),
        set=tuple((f, draw(_field_value(f))) for f in sorted(chosen)),
        unset=unset - kind.clocks,
        start=draw(st.one_of(st.none(), st.integers(T0, T0 + 1000))) if kind.clocks else None,
    )


def _check(backend: Backend, kind: Kind, steps: list[Change]) -> None:
    key = {PK: {"S": f"demo b-{uuid.uuid4().hex[:8]}"}}
    record = Row()
    for change in steps:
        apply(record, change)
        update = render_change(change, CATEGORIES, None, kind.layout)
        if not update.expression:
            continue  # nothing to write (no adapter sends one)
        item = updates.update(
            backend.client,
            backend.settings.counters_table,
            key,
            update.expression,
            "",
            update.names,
            update.values,
            "applying a change",
        )
        assert kind.decode(item) == _memory_snapshot(kind, record)
        expiry = kind.layout.fields[Field.EXPIRES][1]
        stored = int(item[expiry]["N"]) if expiry in item else None
        expires = record.fields.get(Field.EXPIRES)
        assert stored == (ttl(expires) if expires is not None else None)


def _memory_snapshot(kind: Kind, record: Row) -> Any:
    snapshot = kind.snapshot(record)
    return replace(snapshot, calls=()) if kind is SESSION_KIND else snapshot


_SETTINGS = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(first=changes(SESSION_KIND), rest=st.lists(changes(SESSION_KIND), max_size=3))
def test_a_session_change_means_the_same_in_memory_and_on_dynamodb(
    backend: Backend, first: Change, rest: list[Change]
) -> None:
    _check(backend, SESSION_KIND, [replace(first, start=T0), *rest])  # a new record's clocks


@_SETTINGS
@given(steps=st.lists(changes(BUDGET_KIND), min_size=1, max_size=4))
def test_a_budget_change_means_the_same_in_memory_and_on_dynamodb(
    backend: Backend, steps: list[Change]
) -> None:
    _check(backend, BUDGET_KIND, steps)
