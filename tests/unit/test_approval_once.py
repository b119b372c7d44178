"""The property of issue 32: an approval is used at most once, whatever the
interleaving of asks, decisions, uses (allowed, refused or failed counts) and time."""

from __future__ import annotations

import contextlib

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from chalicelib.check.approvals import ApprovalDenied, ApprovalRequired, Approvals
from chalicelib.check.auditing import Auditor
from chalicelib.errors import Conflict
from chalicelib.quota.answers import Decision, Refused
from chalicelib.quota.approvals import Approval, ApprovalKey
from chalicelib.quota.policy import parse_policy
from chalicelib.storage.memory.approvals import MemoryApprovals
from chalicelib.storage.memory.audit import MemoryAuditLog
from chalicelib.storage.ports import StoreUnavailable
from tests.support import FixedClock

POLICY = parse_policy(
    {
        "version": 1,
        "categories": {"read": {"limit": 200}, "write": {"limit": 15}},
        "approval_seconds": 60,
        "rules": [{"tools": ["drop_table"], "category": "write", "approval": True}],
    }
)
KEYS = [ApprovalKey("acme", "alice", "drop_table", d * 64) for d in "ab"]
REFUSED = Refused.__new__(Refused)  # a refusal's shape is not at stake here


class StaleReads(MemoryApprovals):
    """The memory store, whose `latest` may answer what another copy read earlier: the
    interleaving where copies read before any of them writes."""

    def __init__(self) -> None:
        super().__init__()
        self.stale: Approval | None = None

    def latest(self, key: ApprovalKey) -> Approval | None:
        if self.stale is not None and self.stale.key == key:
            return self.stale
        return super().latest(key)


class OnceMachine(RuleBasedStateMachine):
    """Random sequences against the approval step on the memory store, with a model of
    which approvals an administrator granted and how many calls ran on each."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock(0)
        self.store = StaleReads()
        self.read: dict[ApprovalKey, Approval] = {}
        self.desk = Approvals(
            POLICY, self.store, self.clock, lambda: Auditor(MemoryAuditLog()), lambda: ""
        )
        self.granted: set[str] = set()
        self.runs: dict[str, int] = {}

    @rule(
        key=st.sampled_from(KEYS),
        outcome=st.sampled_from(["allowed", "refused", "fault"]),
        stale=st.booleans(),
    )
    def call(self, key: ApprovalKey, outcome: str, stale: bool) -> None:
        """A copy of the call; `stale`: it acts on what an earlier copy read."""
        self.store.stale = self.read.get(key) if stale else None
        before = self.store.latest(key)
        if before is not None:
            self.read.setdefault(key, before)

        def check() -> Decision:
            if outcome == "fault":
                raise StoreUnavailable("counting")
            if outcome == "refused":
                return REFUSED
            assert before is not None
            self.runs[before.approval_id] = self.runs.get(before.approval_id, 0) + 1
            return object()  # type: ignore[return-value]  # any allowed answer

        with contextlib.suppress(ApprovalRequired, ApprovalDenied, StoreUnavailable):
            self.desk.guarded(key, ("s", None, None), check)
        self.store.stale = None
        if not stale and before is not None:
            self.read[key] = before

    @rule(key=st.sampled_from(KEYS), approve=st.booleans())
    def decide(self, key: ApprovalKey, approve: bool) -> None:
        latest = self.store.latest(key)
        if latest is None:
            return
        try:
            self.desk.decide("acme", latest.approval_id, approve, "admin", None)
        except Conflict:
            return
        if approve:
            self.granted.add(latest.approval_id)

    @rule(seconds=st.integers(0, 90))
    def wait(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @invariant()
    def used_at_most_once(self) -> None:
        assert all(n == 1 for n in self.runs.values()), self.runs
        assert set(self.runs) <= self.granted


OnceMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=20, deadline=None)
test_an_approval_is_used_at_most_once = OnceMachine.TestCase
