"""The approvals port (issue 32), apart from `ports` to keep each module to one job."""

from __future__ import annotations

from typing import Protocol

from chalicelib.quota.approvals import Approval, ApprovalKey, ApprovalState


class ApprovalStore(Protocol):
    """Approvals of single calls (issue 32): each change is one conditional write."""

    def latest(self, key: ApprovalKey) -> Approval | None:
        """The newest approval for this call, if any.

        Raises:
            StorageError: the store failed.
        """

    def put_new(self, approval: Approval, replacing: str | None) -> Approval:
        """Store a new approval for its call unless the newest is no longer `replacing`
        (another check asked first): then that one is returned.

        Raises:
            StorageError: the store failed.
        """

    def get(self, tenant: str, approval_id: str) -> Approval:
        """One approval.

        Raises:
            RecordNotFound: no such approval in this tenant.
            StorageError: the store failed.
        """

    def list(self, tenant: str) -> list[Approval]:
        """The tenant's approvals, newest first.

        Raises:
            StorageError: the store failed.
        """

    def change(
        self, new: Approval, expected: ApprovalState, now_ms: int
    ) -> tuple[bool, Approval | None]:
        """Replace the approval if it is still `expected` and unexpired at `now_ms` (a
        give-back, expected `used`, ignores the expiry); whether it did, and the old one.

        Raises:
            StorageError: the store failed.
        """
