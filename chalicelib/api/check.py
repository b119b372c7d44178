"""What MCP servers call: the check before each tool call, the return of a lease's
unspent calls, the policy's rules they weigh calls by, and the liveness probe."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from chalice.app import Blueprint, Response

from chalicelib.api import lambda_hold
from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, flush_held, request_body, server_caller
from chalicelib.api.deferred import answers, approval_rules, aws, binding, deadline, validation
from chalicelib.api.responses import decision_response, handled, json_response, policy_view
from chalicelib.lazy import collector_paused, preload

if TYPE_CHECKING:
    from chalicelib.check.minted import Sealing

checks = Blueprint(__name__)


def warm() -> None:
    """Import what an allowed check needs and build the DynamoDB client: on Lambda, app.py
    calls this in the init phase, before the first request (an init may run ahead of any
    request, and is not metered against the invocation's CPU share). Nothing here reads
    the settings or the policy, so nothing can fail that the first check would not report."""
    with collector_paused():
        preload(answers, binding, deadline, validation, aws)
        deps().dynamodb  # noqa: B018 (built for its side effect)
    lambda_hold.start(at_shutdown=flush_held)  # admissions after the answers; at shutdown


@checks.route("/health", methods=["GET"])
@handled
def health() -> Response:
    """Liveness: no token, no store access."""
    return json_response({"status": "ok", "service": "mcp-quota"})


@checks.route("/v1/check", methods=["POST"], authorizer=bearer)
@handled
def check() -> Response:
    """Count one tool call against its session's budget, or refuse it."""
    request = checks.current_request
    identity = server_caller(request)
    container = deps()
    body = request_body(request)
    preview = approval_rules.preview_param(body) if "arguments_preview" in body else None
    parsed = validation.parse_check(body, container.policy)
    sealing: Sealing | None = None
    if parsed.session_token is not None or parsed.mint_session:
        # A session the service minted: verified here, so the check sees a plain id.
        parsed, sealing = container.session_mint.resolve(identity, parsed)
    run = partial(binding.check_as, identity, parsed, container.checks)
    # Answered before the client gives up, and no store request left running past it.
    by = deadline.Deadline.starting(aws.STORE_STEP_SECONDS, _remaining_ms())
    with deadline.answering_by(by):
        if not container.policy.needs_approval(parsed.tool):
            decision = run()
        else:
            # A call that needs a human's approval runs on one, used once (issue 32); a
            # copy of one that ran is answered as any copy is, before any approval.
            key = approval_rules.approval_key(identity, parsed)
            context = (parsed.session_id, parsed.server, preview)
            copy = binding.copy_as(identity, parsed, container.checks)
            decision = container.approvals.guarded(key, context, run) if copy is None else copy
        replay = _replay(identity.tenant, parsed, decision)
        token = None if sealing is None else sealing.token(parsed.session_id)
        return decision_response(decision, replay, token)


def _replay(
    tenant: str, parsed: validation.CheckRequest, decision: answers.Decision
) -> dict[str, object] | None:
    """A duplicate's stored result, in a replaying category: only a duplicate reads it,
    so an allowed first call costs no store request more."""
    if not isinstance(decision, answers.Allowed) or not decision.duplicate:
        return None
    desk = deps().result_desk
    if parsed.call_id is None or not desk.replays(decision.category):
        return None
    return desk.replay(tenant, parsed.session_id, parsed.call_id).to_json()


def _remaining_ms() -> int | None:
    """The Lambda's remaining time, if this runs in one."""
    context = checks.lambda_context
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    return int(remaining()) if callable(remaining) else None


@checks.route("/v1/policy", methods=["GET"], authorizer=bearer)
@handled
def policy() -> Response:
    """The policy's rules, for the MCP side to weigh calls by (`units_from`)."""
    server_caller(checks.current_request)
    view = policy_view(deps().policy)
    return json_response(view, headers={"Cache-Control": f"max-age={view['max_age_seconds']}"})


@checks.route("/v1/leases/return", methods=["POST"], authorizer=bearer)
@handled
def return_lease() -> Response:
    """Give back the calls of a lease the client did not spend; best effort, once."""
    request = checks.current_request
    identity = server_caller(request)
    parsed = validation.parse_lease_return(request_body(request))
    return json_response({"returned": deps().checks.return_lease(identity.tenant, parsed)})
