"""The approval step of a check (issue 32): a call of a tool whose rule says
`"approval": true` runs only on an approved approval bound to it, used once.

Ordering (the approval and the counters are separate items): the approval is consumed
first, under the condition `state = approved` and unexpired, then the call is counted;
if the count refuses or fails, the approval is given back (`used` -> `approved`). Of any
number of concurrent copies, only the one whose consume succeeded is counted, so a call
never runs twice on one approval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from chalicelib.auth.tokens import Identity, effective_principal
from chalicelib.check.auditing import Auditor
from chalicelib.check.requests import CheckRequest
from chalicelib.clock import Clock, iso_utc
from chalicelib.errors import Conflict, Forbidden, InvalidRequest, NotFound
from chalicelib.quota.answers import Decision, Refused
from chalicelib.quota.approvals import (
    Approval,
    ApprovalKey,
    ApprovalState,
    Gate,
    decided,
    gate,
    new_approval_id,
    shorten,
)
from chalicelib.quota.events import TENANT_SCOPE, AuditEvent, EventType
from chalicelib.quota.policy import Policy
from chalicelib.storage.approval_port import ApprovalStore
from chalicelib.storage.ports import RecordNotFound

MAX_PREVIEW_BODY = 4096  # what a check may send; MAX_PREVIEW of it is kept
# Where a call asking for an approval comes from: its session, its server and the
# preview of its arguments (each where the check named it).
CallContext = tuple[str | None, str | None, str | None]


class ApprovalRequired(Forbidden):
    """The call needs a human's approval; the answer names it."""

    CODE = "approval_required"

    def __init__(self, approval: Approval, console_url: str) -> None:
        super().__init__(
            f"Tool {approval.key.tool!r} needs an administrator's approval for this exact "
            f"call (these arguments, principal {approval.key.principal!r}). Ask an "
            f"administrator to approve {approval.approval_id} at {console_url} before "
            f"{iso_utc(approval.expires_ms)}, then retry the same call."
        )
        self.approval = approval
        self.console_url = console_url

    def body(self) -> dict[str, object]:
        body = super().body()
        body["approval"] = {
            "id": self.approval.approval_id,
            "expires_at": iso_utc(self.approval.expires_ms),
            "console_url": self.console_url,
        }
        return body


class ApprovalDenied(Forbidden):
    """An administrator denied this call."""

    CODE = "approval_denied"

    def __init__(self, approval: Approval) -> None:
        why = f" ({approval.reason})" if approval.reason else ""
        super().__init__(
            f"An administrator denied this call of {approval.key.tool!r}{why}: do not "
            "retry it; change the arguments or ask the administrator."
        )


@dataclass(frozen=True, eq=False)
class Approvals:
    """Asks for, decides and uses approvals."""

    policy: Policy
    store: ApprovalStore
    clock: Clock
    auditor: Callable[[], Auditor]
    base_url: Callable[[], str]
    notify: Callable[[Approval, str], None] | None = None

    def needs(self, tool: str) -> bool:
        """Whether calls of this tool need an approval."""
        return self.policy.needs_approval(tool)

    def console_url(self, approval_id: str) -> str:
        """Where an administrator approves it."""
        return f"{self.base_url()}/console#/approvals/{approval_id}"

    def guarded(
        self,
        key: ApprovalKey,
        context: CallContext,
        check: Callable[[], Decision],
    ) -> Decision:
        """Run the check on a consumed approval, giving it back if the call is not counted.

        Raises:
            ApprovalRequired: no usable approval (a pending one is answered again).
            ApprovalDenied: the newest approval for the call was denied.
            StorageError: a store failed (a consumed approval was given back first).
        """
        now = self.clock()
        latest = self.store.latest(key)
        outcome = gate(latest, now)
        if outcome is Gate.DENIED and latest is not None:
            raise ApprovalDenied(latest)
        if outcome is Gate.USE and latest is not None:
            used = replace(latest, state=ApprovalState.USED)
            done, _ = self.store.change(used, ApprovalState.APPROVED, now)
            if done:
                return self._run(latest, context, check)
            latest = self.store.latest(key)  # another copy used it: ask anew
        if outcome is Gate.WAIT and latest is not None:
            raise ApprovalRequired(latest, self.console_url(latest.approval_id))
        if latest is not None and latest.state_at(now) is ApprovalState.EXPIRED:
            self._audit(EventType.APPROVAL_EXPIRED, latest, "mcp-quota", None)
        raise self._ask(key, context, latest, now)

    def _run(
        self,
        approval: Approval,
        context: CallContext,
        check: Callable[[], Decision],
    ) -> Decision:
        try:
            decision = check()
        except Exception:
            self._give_back(approval)
            raise
        if isinstance(decision, Refused):
            self._give_back(approval)
        else:
            # Any session of the principal may use it: audited where the call ran.
            session_id, server, _ = context
            used = replace(
                approval,
                session_id=session_id or approval.session_id,
                server=server or approval.server,
            )
            asked = {"requested_in_session": approval.session_id or TENANT_SCOPE}
            self._audit(EventType.APPROVAL_USED, used, "mcp-quota", None, asked)
        return decision

    def _give_back(self, approval: Approval) -> None:
        self.store.change(approval, ApprovalState.USED, self.clock())

    def _ask(
        self,
        key: ApprovalKey,
        context: CallContext,
        latest: Approval | None,
        now: int,
    ) -> ApprovalRequired:
        session_id, server, preview = context
        fresh = Approval(
            new_approval_id(),
            key,
            ApprovalState.PENDING,
            now,
            now + self.policy.approval_seconds * 1000,
            session_id,
            server,
            shorten(preview),
        )
        stored = self.store.put_new(fresh, latest.approval_id if latest else None)
        url = self.console_url(stored.approval_id)
        if stored.approval_id == fresh.approval_id:
            self._audit(EventType.APPROVAL_REQUESTED, stored, "mcp-quota", None)
            if self.notify is not None:
                self.notify(stored, url)
        return ApprovalRequired(stored, url)

    def decide(
        self,
        tenant: str,
        approval_id: str,
        approve: bool,
        actor: str,
        reason: str | None,
        via: Mapping[str, str] | None = None,
    ) -> Approval:
        """An administrator's decision on a pending approval: from the API and the
        console, or through the approval email's link (`via` names it in the audit).

        Raises:
            NotFound: no such approval in this tenant.
            Conflict: it is no longer pending (decided, used or expired).
        """
        current = self.get(tenant, approval_id)
        now = self.clock()
        done, old = self.store.change(
            decided(current, approve, actor, reason), ApprovalState.PENDING, now
        )
        if not done:
            state = (old or current).state_at(now)
            raise Conflict(f"Approval {approval_id} is {state}, not pending: nothing to decide.")
        kind = EventType.APPROVAL_GRANTED if approve else EventType.APPROVAL_DENIED
        after = self.get(tenant, approval_id)
        self._audit(kind, after, actor, reason, via)
        return after

    def get(self, tenant: str, approval_id: str) -> Approval:
        """One approval of the tenant.

        Raises:
            NotFound: no such approval in this tenant.
        """
        try:
            return self.store.get(tenant, approval_id)
        except RecordNotFound as exc:
            raise NotFound(f"No approval {approval_id} in this tenant.") from exc

    def listed(self, tenant: str, state: ApprovalState | None) -> list[Approval]:
        """The tenant's approvals in one state (all without one), newest first."""
        now = self.clock()
        return [a for a in self.store.list(tenant) if state is None or a.state_at(now) is state]

    def _audit(
        self,
        kind: EventType,
        approval: Approval,
        actor: str,
        reason: str | None,
        detail: Mapping[str, str] | None = None,
    ) -> None:
        self.auditor().record(
            AuditEvent(
                at_ms=self.clock(),
                type=kind,
                tenant=approval.key.tenant,
                session_id=approval.session_id or TENANT_SCOPE,
                actor=actor,
                reason=reason,
                detail={
                    "approval_id": approval.approval_id,
                    "tool": approval.key.tool,
                    "args_digest": approval.key.args_digest,
                    **(detail or {}),
                },
                principal=approval.key.principal,
                server=approval.server,
            )
        )


def approval_state_param(raw: str | None) -> ApprovalState | None:
    """The `state` query parameter.

    Raises:
        InvalidRequest: not a known state.
    """
    if raw is None:
        return None
    try:
        return ApprovalState(raw)
    except ValueError as exc:
        names = ", ".join(s.value for s in ApprovalState)
        raise InvalidRequest(f"state must be one of {names}.", "state") from exc


def preview_param(body: dict[str, object]) -> str | None:
    """Take the optional `arguments_preview` out of a check body (the rest is parsed
    as before): the arguments as the MCP side sent them, for the approver's eyes only.

    Raises:
        InvalidRequest: not a string, or over MAX_PREVIEW_BODY characters.
    """
    raw = body.pop("arguments_preview", None)
    if raw is None:
        return None
    if not isinstance(raw, str) or len(raw) > MAX_PREVIEW_BODY:
        raise InvalidRequest(
            f"arguments_preview must be a string of at most {MAX_PREVIEW_BODY} characters.",
            "arguments_preview",
        )
    return raw


def approval_key(identity: Identity, request: CheckRequest) -> ApprovalKey:
    """The call an approval must be bound to: the token's tenant, the principal the
    check counts as, the tool and the arguments' digest.

    Raises:
        InvalidRequest: no args_digest (an approval binds the arguments).
        PrincipalNotAllowed: the claimed principal is not the token's.
    """
    if request.args_digest is None:
        raise InvalidRequest(
            f"Tool {request.tool!r} needs an approval of each call, bound to its "
            "arguments: send args_digest (the SHA-256 hex of the canonical JSON arguments).",
            "args_digest",
        )
    principal = effective_principal(identity, request.principal)
    return ApprovalKey(identity.tenant, principal, request.tool, request.args_digest)
