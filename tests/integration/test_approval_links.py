"""The approval email's links (issue 32) on the real stores: concurrent clicks of an
approve and a deny link make one decision, on memory and on dynalite (atomic per item,
as DynamoDB; moto is not under concurrent requests, so it is left out here)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from chalicelib.check.approvals import ApprovalRequired, Approvals
from chalicelib.check.auditing import Auditor
from chalicelib.links.approval_links import ApprovalDesk, ApprovalLinkMaker
from chalicelib.links.signing import LinkPayload, LinkSigner
from chalicelib.quota.approvals import ApprovalKey, ApprovalState
from chalicelib.quota.events import EventType
from chalicelib.quota.policy import parse_policy
from chalicelib.storage.dynamodb.approvals import ApprovalTable
from chalicelib.storage.dynamodb.links import LinkUseStore
from chalicelib.storage.memory.approvals import MemoryApprovals
from chalicelib.storage.memory.audit import MemoryAuditLog
from chalicelib.storage.memory.tables import MemoryLinkUses
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
SIGNER = LinkSigner([b"k" * 32])


@dataclass
class Desk:
    approvals: Approvals
    desk: ApprovalDesk
    audit: MemoryAuditLog


@pytest.fixture(params=["memory", "dynalite"])
def desk(request: pytest.FixtureRequest) -> Iterator[Desk]:
    clock = FixedClock(1_000)
    audit = MemoryAuditLog()
    auditor = Auditor(audit)
    if request.param == "memory":
        approvals = Approvals(POLICY, MemoryApprovals(), clock, lambda: auditor, lambda: "")
        yield Desk(
            approvals, ApprovalDesk(approvals, MemoryLinkUses(), clock, auditor.record), audit
        )
        return
    for backend in _backend(request, "dynalite"):
        store = ApprovalTable(backend.client, backend.settings.audit_table)
        uses = LinkUseStore(backend.client, backend.settings.counters_table)
        approvals = Approvals(POLICY, store, clock, lambda: auditor, lambda: "")
        yield Desk(approvals, ApprovalDesk(approvals, uses, clock, auditor.record), audit)


def test_concurrent_clicks_of_both_links_make_one_decision(desk: Desk) -> None:
    """4 clicks of the approve link and 4 of the deny link, at once: one decision,
    audited once. (Defect class: a double click, or a scanner and a human, deciding
    twice; a read-then-write link use.)"""
    with pytest.raises(ApprovalRequired) as asked:
        desk.approvals.guarded(KEY, ("s1", None, "{}"), lambda: pytest.fail("ran unapproved"))
    approval = asked.value.approval
    approve, deny = ApprovalLinkMaker(SIGNER, "http://q.test").links(approval)
    payloads = []
    for link in (approve, deny):
        read = SIGNER.verify(link.url.rsplit("/", 1)[1], 1_000)
        assert isinstance(read, LinkPayload)
        payloads.append(read)

    with ThreadPoolExecutor(8) as pool:
        pages = list(pool.map(lambda i: desk.desk.perform(payloads[i % 2]), range(8)))
    assert [p.status for p in pages].count(200) == 1, [(p.status, p.title) for p in pages]
    final = desk.approvals.get("acme", approval.approval_id).state
    assert final in (ApprovalState.APPROVED, ApprovalState.DENIED)
    decided = (EventType.APPROVAL_GRANTED, EventType.APPROVAL_DENIED)
    decisions = [e for e in desk.audit.page("acme", "s1").events if e.type in decided]
    assert len(decisions) == 1 and decisions[0].actor == "email-link"
