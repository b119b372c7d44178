"""The wider budgets' admin routes: a principal's (show, raise, suspend, resume, reset)
and the tenant's ceiling (show)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, operator_and_body, path_principal, reader
from chalicelib.api.responses import handled, json_response
from chalicelib.lazy import lazy_module

if TYPE_CHECKING:
    from chalicelib.admin import requests as admin_requests
    from chalicelib.quota import core as quota
else:
    admin_requests = lazy_module("chalicelib.admin.requests")
    quota = lazy_module("chalicelib.quota.core")

principals = Blueprint(__name__)


@principals.route("/v1/principals/{principal}", methods=["GET"], authorizer=bearer)
@handled
def show_principal(principal: str) -> Response:
    """A principal's windowed counters, limits and state, in every session."""
    who = reader(principals.current_request)
    return json_response(deps().budget_admin.show(path_principal(who, principal)))


@principals.route("/v1/principals/{principal}/raise", methods=["POST"], authorizer=bearer)
@handled
def raise_principal(principal: str) -> Response:
    """Raise one category's principal budget."""
    who, body = operator_and_body(principals.current_request)
    parsed = admin_requests.parse_raise(body, deps().policy)
    return json_response(
        deps().budget_admin.raise_limit(who, path_principal(who, principal), parsed)
    )


@principals.route("/v1/principals/{principal}/suspend", methods=["POST"], authorizer=bearer)
@handled
def suspend_principal(principal: str) -> Response:
    """Refuse every call made for this principal, in every session."""
    who, body = operator_and_body(principals.current_request)
    reason = admin_requests.parse_reason(body)
    return json_response(deps().budget_admin.suspend(who, path_principal(who, principal), reason))


@principals.route("/v1/principals/{principal}/resume", methods=["POST"], authorizer=bearer)
@handled
def resume_principal(principal: str) -> Response:
    """Lift a principal's suspension, manual or automatic."""
    who, body = operator_and_body(principals.current_request)
    reason = admin_requests.parse_reason(body)
    return json_response(deps().budget_admin.resume(who, path_principal(who, principal), reason))


@principals.route("/v1/principals/{principal}/reset", methods=["POST"], authorizer=bearer)
@handled
def reset_principal(principal: str) -> Response:
    """Zero a principal's counters in every window."""
    who, body = operator_and_body(principals.current_request)
    reason = admin_requests.parse_reason(body)
    return json_response(deps().budget_admin.reset(who, path_principal(who, principal), reason))


@principals.route("/v1/tenant", methods=["GET"], authorizer=bearer)
@handled
def show_tenant() -> Response:
    """The tenant's ceiling: counters, limits and windows."""
    who = reader(principals.current_request)
    return json_response(deps().budget_admin.show(quota.BudgetKey.whole_tenant(who.tenant)))
