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
    from chalicelib.check import binding
    from chalicelib.check import requests as validation
else:
    binding = lazy_module("chalicelib.check.binding")
    validation = lazy_module("chalicelib.check.requests")

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
    return decision_response(binding.check_as(identity, parsed, container.checks))


@checks.route("/v1/leases/return", methods=["POST"], authorizer=bearer)
@handled
def return_lease() -> Response:
    """Give back the calls of a lease the client did not spend; best effort, once."""
    request = checks.current_request
    identity = server_caller(request)
    parsed = validation.parse_lease_return(request_body(request))
    return json_response({"returned": deps().checks.return_lease(identity.tenant, parsed)})
