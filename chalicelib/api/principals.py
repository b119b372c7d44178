"""The wider budgets' admin routes: a principal's (show, raise, suspend, resume, reset)
and the tenant's ceiling (show)."""

from __future__ import annotations

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, path_principal, reader
from chalicelib.api.deferred import quota
from chalicelib.api.operator_routes import Change, operator_routes, raise_request, reason
from chalicelib.api.responses import handled, json_response

principals = Blueprint(__name__)


@principals.route("/v1/principals/{principal}", methods=["GET"], authorizer=bearer)
@handled
def show_principal(principal: str) -> Response:
    """A principal's windowed counters, limits and state, in every session."""
    who = reader(principals.current_request)
    return json_response(deps().budget_admin.show(path_principal(who, principal)))


@principals.route("/v1/tenant", methods=["GET"], authorizer=bearer)
@handled
def show_tenant() -> Response:
    """The tenant's ceiling: counters, limits and windows."""
    who = reader(principals.current_request)
    return json_response(deps().budget_admin.show(quota.BudgetKey.whole_tenant(who.tenant)))


operator_routes(
    principals,
    "/v1/principals/{principal}",
    "principal",
    path_principal,
    lambda container: container.budget_admin,
    {
        "raise": Change(
            "Raise one category's principal budget.",
            raise_request,
            lambda budgets: budgets.raise_limit,
        ),
        "suspend": Change(
            "Refuse every call made for this principal, in every session.",
            reason,
            lambda budgets: budgets.suspend,
        ),
        "resume": Change(
            "Lift a principal's suspension, manual or automatic.",
            reason,
            lambda budgets: budgets.resume,
        ),
        "reset": Change(
            "Zero a principal's counters in every window.", reason, lambda budgets: budgets.reset
        ),
    },
)
