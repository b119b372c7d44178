"""Approvals of single calls (issue 32): list, show, approve, deny. Viewers may read;
approving or denying needs an operator or an admin; a server token gets 403."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, operator_and_body, reader, reader_and_query
from chalicelib.api.deferred import approval_rules, clock, errors
from chalicelib.api.responses import handled, json_response

if TYPE_CHECKING:
    from chalicelib.api.schemas import ApprovalView
    from chalicelib.auth.tokens import Identity
    from chalicelib.quota.approvals import Approval

approvals = Blueprint(__name__)
MAX_REASON = 1000


@approvals.route("/v1/approvals", methods=["GET"], authorizer=bearer)
@handled
def list_approvals() -> Response:
    """The tenant's approvals, newest first, in one state if asked."""
    who, params = reader_and_query(approvals.current_request)
    state = approval_rules.approval_state_param(params.get("state"))
    container = deps()
    listed = container.approvals.listed(who.tenant, state)
    now = container.clock()
    return json_response({"approvals": [view(a, now) for a in listed]})


@approvals.route("/v1/approvals/{approval_id}", methods=["GET"], authorizer=bearer)
@handled
def show_approval(approval_id: str) -> Response:
    """One approval."""
    who = reader(approvals.current_request)
    container = deps()
    return json_response(view(container.approvals.get(who.tenant, approval_id), container.clock()))


@approvals.route("/v1/approvals/{approval_id}/approve", methods=["POST"], authorizer=bearer)
@handled
def approve(approval_id: str) -> Response:
    """Approve a pending approval: its call may then run once."""
    who, body = operator_and_body(approvals.current_request)
    return _decide(who, body, approval_id, True)


@approvals.route("/v1/approvals/{approval_id}/deny", methods=["POST"], authorizer=bearer)
@handled
def deny(approval_id: str) -> Response:
    """Deny a pending approval: its call is refused with approval_denied."""
    who, body = operator_and_body(approvals.current_request)
    return _decide(who, body, approval_id, False)


def _decide(who: Identity, body: dict[str, Any], approval_id: str, approve: bool) -> Response:
    reason = _reason(body)
    container = deps()
    decided = container.approvals.decide(who.tenant, approval_id, approve, who.actor, reason)
    return json_response(view(decided, container.clock()))


def _reason(body: dict[str, Any]) -> str | None:
    """The optional reason of a decision.

    Raises:
        InvalidRequest: an unknown field, or a reason that is not a short string.
    """
    unknown = set(body) - {"reason"}
    if unknown:
        raise errors.InvalidRequest(f"Unknown field {sorted(unknown)[0]!r}.", sorted(unknown)[0])
    reason = body.get("reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON):
        raise errors.InvalidRequest(
            f"reason must be a string of at most {MAX_REASON} chars.", "reason"
        )
    return reason


def view(approval: Approval, now_ms: int) -> ApprovalView:
    """An approval as the API shows it (the console and the CLI read this)."""
    return {
        "id": approval.approval_id,
        "state": str(approval.state_at(now_ms)),
        "principal": approval.key.principal,
        "tool": approval.key.tool,
        "args_digest": approval.key.args_digest,
        "arguments_preview": approval.arguments_preview,
        "session_id": approval.session_id,
        "server": approval.server,
        "created_at": clock.iso_utc(approval.created_ms),
        "expires_at": clock.iso_utc(approval.expires_ms),
        "decided_by": approval.decided_by,
        "reason": approval.reason,
    }
