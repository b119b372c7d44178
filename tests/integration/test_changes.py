"""The core's changes (`quota.changes`) mean the same on every backend: random sequences of
changes, applied by the memory backend and rendered into UpdateItems on moto and dynalite,
leave the same session record. What a write changes is written once, in the core; this
proves the two translations of it agree."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.quota.changes import COUNTING, Change, Field, Slot
from chalicelib.quota.core import ClientInfo, SessionKey, SessionSnapshot
from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.changes import render_change
from chalicelib.storage.dynamodb.codec import key_of, snapshot_from_item, ttl
from chalicelib.storage.dynamodb.layout import EXPIRES, PK
from chalicelib.storage.memory.counters import _Session
from tests.support import Backend

CATEGORIES = ("read", "write", "admin")
REPEAT_KEYS = ("delete_tag|ab|600000", "delete_tag|cd|1200000")
T0 = 1_700_000_000_000

_MAP_SLOTS = [slot for slot in Slot if slot is not Slot.REPEATS]


def _keys(slot: Slot) -> tuple[str, ...]:
    return REPEAT_KEYS if slot is Slot.REPEATS else CATEGORIES


def _slot_value(slot: Slot) -> st.SearchStrategy[Any]:
    if slot is Slot.GRANTS:
        return st.sampled_from(["1700000000000.5", "1700000001000.3"])
    if slot is Slot.FIRST_REFUSALS:
        return st.tuples(st.integers(1, 300), st.sampled_from(["c1", "c2"]))
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
def changes(draw: st.DrawFn) -> Change:
    """A valid change: each map entry written once, nothing added to a cleared map."""
    clear = frozenset(draw(st.sets(st.sampled_from(_MAP_SLOTS), max_size=2)))
    used: set[tuple[Slot, str]] = set()

    def entries(max_size: int) -> list[tuple[Slot, str]]:
        picked = draw(
            st.lists(
                st.sampled_from([(s, k) for s in Slot for k in _keys(s)]),
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
    fields = draw(st.sets(st.sampled_from(list(Field)), max_size=4))
    unset = frozenset(draw(st.sets(st.sampled_from(list(Field)), max_size=2)) - fields)
    unset -= {Field.LAST_SEEN, Field.STARTED}  # a record always has its clocks
    return Change(
        clear=clear,
        drop=tuple(drops),
        add=tuple(adds),
        put=tuple(puts),
        set=tuple((f, draw(_field_value(f))) for f in sorted(fields)),
        unset=unset,
        start=draw(st.one_of(st.none(), st.integers(T0, T0 + 1000))),
    )


def _apply_memory(record: _Session | None, change: Change) -> _Session:
    if record is None:
        start = change.start if change.start is not None else 0
        record = _Session(start, start, None)
    record.apply(change)
    return record


def _comparable(snapshot: SessionSnapshot) -> SessionSnapshot:
    # The last calls are the adapters' (they fold and trim alike; other suites show it).
    return replace(snapshot, calls=())


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=changes(), rest=st.lists(changes(), max_size=3))
def test_memory_and_dynamodb_apply_a_change_alike(
    backend: Backend, first: Change, rest: list[Change]
) -> None:
    first = replace(first, start=T0)  # a new record starts its clocks
    key = key_of(SessionKey("demo", f"s-{uuid.uuid4().hex[:8]}"))
    table = backend.settings.counters_table
    memory: _Session | None = None
    for change in [first, *rest]:
        memory = _apply_memory(memory, change)
        update = render_change(change, CATEGORIES)
        item = updates.update(
            backend.client,
            table,
            {PK: {"S": key}},
            update.expression,
            "",
            update.names,
            update.values,
            "applying a change",
        )
        assert _comparable(snapshot_from_item(item)) == _comparable(memory.snapshot())
        stored_expiry = int(item[EXPIRES]["N"]) if EXPIRES in item else None
        expected = ttl(memory.expires_ms) if memory.expires_ms is not None else None
        assert stored_expiry == expected
