"""What MCP servers call: the check before each tool call, the return of a lease's
unspent calls, and the liveness probe."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, request_body, server_caller
from chalicelib.api.responses import decision_response, handled, json_response
from chalicelib.lazy import lazy_module

if TYPE_CHECKING:
    from chalicelib import wiring
    from chalicelib.check import binding, deadline
    from chalicelib.check import requests as validation
    from chalicelib.quota import answers
else:
    answers = lazy_module("chalicelib.quota.answers")
    binding = lazy_module("chalicelib.check.binding")
    deadline = lazy_module("chalicelib.check.deadline")
    validation = lazy_module("chalicelib.check.requests")
    wiring = lazy_module("chalicelib.wiring")

checks = Blueprint(__name__)


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
    parsed = validation.parse_check(request_body(request), container.policy)
    # Answered before the client gives up, and no store request left running past it.
    by = deadline.Deadline.starting(wiring.STORE_STEP_SECONDS, _remaining_ms())
    with deadline.answering_by(by):
        decision = binding.check_as(identity, parsed, container.checks)
        return decision_response(decision, _replay(identity.tenant, parsed, decision))


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


@checks.route("/v1/leases/return", methods=["POST"], authorizer=bearer)
@handled
def return_lease() -> Response:
    """Give back the calls of a lease the client did not spend; best effort, once."""
    request = checks.current_request
    identity = server_caller(request)
    parsed = validation.parse_lease_return(request_body(request))
    return json_response({"returned": deps().checks.return_lease(identity.tenant, parsed)})
