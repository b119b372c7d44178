"""Approvals (issue 32): a human's approval bound to one call (tenant, principal, tool,
arguments digest), its states, and the rules of what a check of such a call gets."""

from __future__ import annotations

import enum
import secrets
from dataclasses import dataclass, replace

from chalicelib.quota.core import Verdict

DEFAULT_APPROVAL_SECONDS = 900
MAX_REASON = 1000
MAX_PREVIEW = 500  # characters of the arguments the email and the console show


class ApprovalState(enum.StrEnum):
    """Where an approval stands; `expired` is derived from the clock, never stored."""

    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    USED = "used"
    EXPIRED = "expired"


class Gate(enum.StrEnum):
    """What a check of a call that needs approval gets from its approval."""

    ASK = "ask"  # none usable: a new pending approval is asked for
    WAIT = "wait"  # one is pending: answered again, not duplicated
    USE = "use"  # approved and unexpired: consumed with the call's count
    DENIED = "denied"


@dataclass(frozen=True)
class ApprovalKey:
    """The call an approval is for."""

    tenant: str
    principal: str
    tool: str
    args_digest: str


@dataclass(frozen=True)
class Approval:
    """One approval and the call it binds."""

    approval_id: str
    key: ApprovalKey
    state: ApprovalState
    created_ms: int
    expires_ms: int
    session_id: str | None = None
    server: str | None = None
    arguments_preview: str | None = None
    decided_by: str | None = None
    reason: str | None = None

    def state_at(self, now_ms: int) -> ApprovalState:
        """The state as a reader sees it: pending or approved past the expiry is expired."""
        live = (ApprovalState.PENDING, ApprovalState.APPROVED)
        if self.state in live and now_ms >= self.expires_ms:
            return ApprovalState.EXPIRED
        return self.state


def new_approval_id() -> str:
    """An unguessable approval id."""
    return "ap_" + secrets.token_hex(12)


def gate(approval: Approval | None, now_ms: int) -> Gate:
    """What a check of the call gets from the latest approval for its key."""
    if approval is None:
        return Gate.ASK
    state = approval.state_at(now_ms)
    if state is ApprovalState.PENDING:
        return Gate.WAIT
    if state is ApprovalState.APPROVED:
        return Gate.USE
    if state is ApprovalState.DENIED:
        return Gate.DENIED
    return Gate.ASK  # used or expired: the next call needs a new approval


# What the session says of a call id that names a call it already admitted (or is
# counting): the verdicts a copy of such a call gets from `rules.session_consume`.
COPY_VERDICTS = frozenset(
    {Verdict.DUPLICATE, Verdict.CALL_ID_USED, Verdict.IN_PROGRESS, Verdict.CALL_ID_CONFLICT}
)


def answered_as_copy(verdict: Verdict) -> bool:
    """Whether a check of a call that needs an approval is answered before its approval
    is looked at, from what its session says of its call id (`verdict`, read without a
    write): the id names a call the session admitted or is counting, so the check is
    answered as such a copy is for any tool (a duplicate with the first run's kept
    result, a copy past its duplicates, or a 409), counts nothing, and neither asks for
    nor uses an approval: the call ran on the one it had. Any other check (no call id,
    an id that is free or was freed by a reset) goes to its approval first."""
    return verdict in COPY_VERDICTS


def decided(approval: Approval, approve: bool, actor: str, reason: str | None) -> Approval:
    """The approval as an administrator's decision leaves it (from pending only)."""
    state = ApprovalState.APPROVED if approve else ApprovalState.DENIED
    return replace(approval, state=state, decided_by=actor, reason=reason)


def shorten(preview: str | None) -> str | None:
    """The arguments as shown: at most MAX_PREVIEW characters, marked when cut."""
    if preview is None or len(preview) <= MAX_PREVIEW:
        return preview
    return preview[: MAX_PREVIEW - 1] + "…"
