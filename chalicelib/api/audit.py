"""The audit trail, a page at a time."""

from __future__ import annotations

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, reader_and_query
from chalicelib.api.deferred import admin_requests
from chalicelib.api.responses import handled, json_response

audit = Blueprint(__name__)


@audit.route("/v1/audit", methods=["GET"], authorizer=bearer)
@handled
def audit_trail() -> Response:
    """A page of the audit trail."""
    who, params = reader_and_query(audit.current_request)
    parsed = admin_requests.parse_audit_query(params)
    return json_response(deps().admin.audit_page(who, parsed))


@audit.route("/v1/shadow", methods=["GET"], authorizer=bearer)
@handled
def shadow_refusals() -> Response:
    """What shadow mode would have refused, by server, principal and tool."""
    who, params = reader_and_query(audit.current_request)
    parsed = admin_requests.parse_audit_query(params)
    return json_response(deps().admin.shadow_view(who, parsed.since_ms))
