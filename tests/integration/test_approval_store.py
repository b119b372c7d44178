"""The approvals port (issue 32) on memory, moto and dynalite, through its public
interface: one behaviour suite, so the in-memory twin cannot drift from DynamoDB; and the
approval step's at-most-once use under concurrent copies."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from threading import Lock

import pytest

from chalicelib.check.approvals import ApprovalRequired, Approvals
from chalicelib.check.auditing import Auditor
from chalicelib.quota.answers import Decision
from chalicelib.quota.approvals import Approval, ApprovalKey, ApprovalState, new_approval_id
from chalicelib.quota.policy import parse_policy
from chalicelib.storage.approval_port import ApprovalStore
from chalicelib.storage.dynamodb.approvals import ApprovalTable
from chalicelib.storage.memory.approvals import MemoryApprovals
from chalicelib.storage.memory.audit import MemoryAuditLog
from chalicelib.storage.ports import RecordNotFound
from tests.conftest import _backend
from tests.support import FixedClock

KEY = ApprovalKey("acme", "alice", "drop_table", "a" * 64)
POLICY = parse_policy(
    {
        "version": 1,
        "categories": {"read": {"limit": 200}, "write": {"limit": 15}},
        "rules": [{"tools": ["drop_table"], "category": "write", "approval": True}],
    }
)


def _store(request: pytest.FixtureRequest) -> Iterator[ApprovalStore]:
    if request.param == "memory":
        yield MemoryApprovals()
        return
    for backend in _backend(request, request.param):
        yield ApprovalTable(backend.client, backend.settings.audit_table)


@pytest.fixture(params=["memory", "moto", "dynalite"])
def store(request: pytest.FixtureRequest) -> Iterator[ApprovalStore]:
    """The approvals port on each backend, fresh tables per test."""
    yield from _store(request)


# In-process moto evaluates a condition and applies the update in steps, not atomically:
# the concurrency case runs where a conditional write is atomic, as on DynamoDB.
@pytest.fixture(params=["memory", "dynalite"])
def atomic_store(request: pytest.FixtureRequest) -> Iterator[ApprovalStore]:
    yield from _store(request)


def pending(now: int, key: ApprovalKey = KEY, preview: str | None = "{}") -> Approval:
    return Approval(
        new_approval_id(), key, ApprovalState.PENDING, now, now + 900_000, "s1", "srv", preview
    )


def test_a_new_approval_is_read_back_whole(store: ApprovalStore) -> None:
    """Every field survives the codec; latest, get and list agree."""
    asked = pending(1_000)
    assert store.put_new(asked, None) == asked
    assert store.latest(KEY) == asked
    assert store.get("acme", asked.approval_id) == asked
    assert store.list("acme") == [asked]
    assert store.list("other") == []
    with pytest.raises(RecordNotFound):
        store.get("other", asked.approval_id)


def test_a_second_ask_gets_the_first(store: ApprovalStore) -> None:
    """Two checks asking at once for one call: one approval, the other gets it.
    (Defect class: duplicate pending approvals for one call.)"""
    first = store.put_new(pending(1_000), None)
    second = store.put_new(pending(1_001), None)
    assert second == first
    assert store.list("acme") == [first]
    newer = store.put_new(pending(1_002), first.approval_id)
    assert store.latest(KEY) == newer


def test_change_holds_only_from_the_expected_live_state(store: ApprovalStore) -> None:
    """A change needs the expected state and, but for a give-back, an unexpired one.
    (Defect class: an approval used twice, or after its expiry.)"""
    asked = store.put_new(pending(1_000), None)
    approved = replace(asked, state=ApprovalState.APPROVED, decided_by="admin")
    assert store.change(approved, ApprovalState.PENDING, 2_000)[0]
    used = replace(approved, state=ApprovalState.USED)
    late = store.change(used, ApprovalState.APPROVED, asked.expires_ms)
    assert late[0] is False
    assert store.change(used, ApprovalState.APPROVED, 3_000)[0]
    assert not store.change(used, ApprovalState.APPROVED, 3_000)[0]
    assert store.change(approved, ApprovalState.USED, asked.expires_ms + 1)[0]  # given back
    assert store.get("acme", asked.approval_id).state is ApprovalState.APPROVED


def test_concurrent_uses_run_the_call_once(atomic_store: ApprovalStore) -> None:
    """8 copies of an approved call at once: exactly one runs. (Defect class: a
    read-then-write use of an approval, over-admitting under concurrency.)"""
    store = atomic_store
    clock = FixedClock(1_000)
    desk = Approvals(POLICY, store, clock, lambda: Auditor(MemoryAuditLog()), lambda: "")
    with pytest.raises(ApprovalRequired) as asked:
        desk.guarded(KEY, ("s1", None, None), lambda: pytest.fail("ran unapproved"))
    desk.decide("acme", asked.value.approval.approval_id, True, "admin", None)
    runs: list[int] = []
    lock = Lock()

    def check() -> Decision:
        with lock:
            runs.append(1)
        return object()  # type: ignore[return-value]  # any allowed answer

    def attempt(_: int) -> bool:
        try:
            desk.guarded(KEY, ("s1", None, None), check)
        except ApprovalRequired:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        ran = list(pool.map(attempt, range(8)))
    assert ran.count(True) == 1
    assert len(runs) == 1
    assert store.get("acme", asked.value.approval.approval_id).state is ApprovalState.USED
