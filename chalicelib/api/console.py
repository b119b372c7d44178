"""The web console's static files (the page asks for a token itself), and the site icon."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalice.app import Blueprint, Response

from chalicelib.api.responses import handled
from chalicelib.lazy import lazy_module

if TYPE_CHECKING:
    from chalicelib import console_files, errors
else:
    console_files = lazy_module("chalicelib.console_files")
    errors = lazy_module("chalicelib.errors")

console = Blueprint(__name__)


@console.route("/console", methods=["GET", "HEAD"])
@handled
def console_page() -> Response:
    """The web console's page; `/console/` redirects here so its relative links work."""
    if console_files.trailing_slash(str(console.current_request.context.get("path", ""))):
        return Response(body="", status_code=308, headers={"Location": "../console"})
    return console_file("index.html")


@console.route("/console/{name}", methods=["GET", "HEAD"])
@handled
def console_asset(name: str) -> Response:
    """The console's script, style sheet and icon."""
    return console_file(name)


@console.route("/favicon.ico", methods=["GET", "HEAD"])
def favicon() -> Response:
    """No icon at the root (the console links its own): 204 instead of a 404 in the log."""
    return Response(body="", status_code=204, headers={"Cache-Control": "max-age=86400"})


def console_file(name: str) -> Response:
    """Raises: errors.NotFound: no such console file."""
    found = console_files.console_file(name)
    if found is None:
        raise errors.NotFound(f"No console file {name[:40]!r}.")
    body, content_type = found
    return Response(body=body, status_code=200, headers=console_files.console_headers(content_type))
