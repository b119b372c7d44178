"""The tenant's bearer tokens: create (the secret is in that answer only), list, revoke."""

from __future__ import annotations

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, manager, manager_and_body
from chalicelib.api.deferred import admin_requests
from chalicelib.api.responses import handled, json_response

tokens = Blueprint(__name__)


@tokens.route("/v1/tokens", methods=["POST"], authorizer=bearer)
@handled
def create_token() -> Response:
    """A new token of the caller's tenant; the token itself is in this answer only."""
    who, body = manager_and_body(tokens.current_request)
    parsed = admin_requests.parse_token(body)
    created = deps().token_admin.create(who, parsed)
    return json_response(created, status=201, headers={"Cache-Control": "no-store"})


@tokens.route("/v1/tokens", methods=["GET"], authorizer=bearer)
@handled
def list_tokens() -> Response:
    """The tenant's tokens, without secrets."""
    return json_response(deps().token_admin.list(manager(tokens.current_request)))


@tokens.route("/v1/tokens/{token_id}", methods=["DELETE"], authorizer=bearer)
@handled
def revoke_token(token_id: str) -> Response:
    """Revoke one of the tenant's tokens (again is harmless)."""
    who = manager(tokens.current_request)
    return json_response(deps().token_admin.revoke(who, admin_requests.token_id_param(token_id)))
