"""Grants: planned raises for a principal in a time window (add, list, delete)."""

from __future__ import annotations

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, manager, manager_and_body, reader
from chalicelib.api.deferred import admin_requests
from chalicelib.api.responses import handled, json_response

grants = Blueprint(__name__)


@grants.route("/v1/grants", methods=["POST"], authorizer=bearer)
@handled
def add_grant() -> Response:
    """Plan a raise for a principal in a time window."""
    who, body = manager_and_body(grants.current_request)
    container = deps()
    parsed = admin_requests.parse_grant(body, container.policy, container.clock())
    return json_response(container.admin.add_grant(who, parsed), status=201)


@grants.route("/v1/grants", methods=["GET"], authorizer=bearer)
@handled
def list_grants() -> Response:
    """The tenant's grants."""
    return json_response(deps().admin.list_grants(reader(grants.current_request)))


@grants.route("/v1/grants/{grant_id}", methods=["DELETE"], authorizer=bearer)
@handled
def delete_grant(grant_id: str) -> Response:
    """Delete a grant."""
    who = manager(grants.current_request)
    return json_response(deps().admin.delete_grant(who, admin_requests.grant_id_param(grant_id)))
