"""In-memory approvals: each change is one compare-and-set under a lock (the memory
twin of a DynamoDB conditional write)."""

from __future__ import annotations

import threading

from chalicelib.quota.approvals import Approval, ApprovalKey, ApprovalState
from chalicelib.storage.ports import RecordNotFound


class MemoryApprovals:
    """The approvals port in dicts."""

    def __init__(self) -> None:
        self._by_id: dict[tuple[str, str], Approval] = {}
        self._latest: dict[ApprovalKey, str] = {}
        self._lock = threading.Lock()

    def latest(self, key: ApprovalKey) -> Approval | None:
        """The newest approval for this call, if any."""
        with self._lock:
            approval_id = self._latest.get(key)
            return None if approval_id is None else self._by_id[(key.tenant, approval_id)]

    def put_new(self, approval: Approval, replacing: str | None) -> Approval:
        """Store a new approval for its call, unless the newest one is no longer
        `replacing` (another check asked first): then that one is returned."""
        with self._lock:
            current = self._latest.get(approval.key)
            if current != replacing and current is not None:
                return self._by_id[(approval.key.tenant, current)]
            self._by_id[(approval.key.tenant, approval.approval_id)] = approval
            self._latest[approval.key] = approval.approval_id
            return approval

    def get(self, tenant: str, approval_id: str) -> Approval:
        """One approval.

        Raises:
            RecordNotFound: no such approval in this tenant.
        """
        with self._lock:
            found = self._by_id.get((tenant, approval_id))
        if found is None:
            raise RecordNotFound("reading an approval")
        return found

    def list(self, tenant: str) -> list[Approval]:
        """The tenant's approvals, newest first."""
        with self._lock:
            mine = [a for (t, _), a in self._by_id.items() if t == tenant]
        return sorted(mine, key=lambda a: (a.created_ms, a.approval_id), reverse=True)

    def change(
        self, new: Approval, expected: ApprovalState, now_ms: int
    ) -> tuple[bool, Approval | None]:
        """Replace the approval if it is still in `expected` and not expired at `now_ms`
        (a give-back, expected `used`, ignores the expiry); returns whether it did and
        the approval as it was."""
        with self._lock:
            key = (new.key.tenant, new.approval_id)
            old = self._by_id.get(key)
            if old is None or old.state is not expected:
                return False, old
            if expected is not ApprovalState.USED and now_ms >= old.expires_ms:
                return False, old
            self._by_id[key] = new
            return True, old
