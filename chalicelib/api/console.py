"""The web console: its static files, the sign-in configuration it loads, and who the
signed-in caller is (the page asks for a token itself); and the site icon."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, reader
from chalicelib.api.deferred import console_files, errors, ports, roles
from chalicelib.api.responses import handled, json_response
from chalicelib.observability import logger

if TYPE_CHECKING:
    from chalicelib.api.schemas import Caller, ConsoleConfig

console = Blueprint(__name__)

SIGN_IN_SCOPE = "openid email profile"
HOST = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$")


@console.route("/console", methods=["GET", "HEAD"])
@handled
def console_page() -> Response:
    """The web console's page; `/console/` redirects here so its relative links work."""
    if console_files.trailing_slash(str(console.current_request.context.get("path", ""))):
        return Response(body="", status_code=308, headers={"Location": "../console"})
    return console_file("index.html", token_origin())


@console.route("/console/{name}", methods=["GET", "HEAD"])
@handled
def console_asset(name: str) -> Response:
    """The console's script, style sheet and icon."""
    return console_file(name)


@console.route("/v1/console-config", methods=["GET"])
@handled
def console_config() -> Response:
    """How the console signs a person in: the identity provider's endpoints and the
    console's client id there (no secret: a public client with PKCE); null: none."""
    verifier = deps().sign_in
    body: ConsoleConfig = {"sign_in": None}
    if verifier is not None:
        endpoints = verifier.keys.endpoints()
        body["sign_in"] = {
            "issuer": verifier.issuer,
            "client_id": verifier.client_id,
            "authorization_endpoint": endpoints.authorization_endpoint,
            "token_endpoint": endpoints.token_endpoint,
            "scope": SIGN_IN_SCOPE,
        }
    return json_response(body, headers={"Cache-Control": "no-store"})


@console.route("/v1/me", methods=["GET"], authorizer=bearer)
@handled
def who_am_i() -> Response:
    """The caller: tenant, role, name and what the role may do (the console shows it)."""
    who = reader(console.current_request)
    body: Caller = {
        "tenant": who.tenant,
        "role": who.role,
        "name": who.name,
        "actor": who.actor,
        "signed_in": who.token_id.startswith("user:"),
        "permissions": [p.value for p in roles.Permission if roles.may(who.role, p)],
    }
    return json_response(body, headers={"Cache-Control": "no-store"})


@console.route("/favicon.ico", methods=["GET", "HEAD"])
def favicon() -> Response:
    """No icon at the root (the console links its own): 204 instead of a 404 in the log."""
    return Response(body="", status_code=204, headers={"Cache-Control": "max-age=86400"})


def token_origin() -> str:
    """The origin of the identity provider's token endpoint, which the page posts the
    authorization code to; empty when sign-in is not configured or not reachable."""
    try:
        verifier = deps().sign_in
        if verifier is None:
            return ""
        parts = urlsplit(verifier.keys.endpoints().token_endpoint)
    except ports.StorageError as exc:
        logger.warning("sign-in issuer unavailable", extra={"error": exc.doing})
        return ""
    if parts.scheme not in ("https", "http") or not HOST.fullmatch(parts.netloc):
        return ""  # it goes into a header: nothing but a plain origin
    return f"{parts.scheme}://{parts.netloc}"


def console_file(name: str, connect: str = "") -> Response:
    """Raises: errors.NotFound: no such console file."""
    found = console_files.console_file(name)
    if found is None:
        raise errors.NotFound(f"No console file {name[:40]!r}.")
    body, content_type = found
    headers = console_files.console_headers(content_type, connect)
    return Response(body=body, status_code=200, headers=headers)
