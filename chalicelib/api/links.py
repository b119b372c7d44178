"""The email's one-click links: a confirmation page, then the action, once. No token in
the URL but the link's own signed one, which is its only authority."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote

from chalice.app import Blueprint, Response

from chalicelib.api.context import deps
from chalicelib.api.deferred import errors
from chalicelib.api.responses import handled, html_response

if TYPE_CHECKING:
    from chalicelib.links.actions import LinkDesk

links = Blueprint(__name__)

# A browser's form posts, whichever encoding it picks.
LINK_CONTENT_TYPES = ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"]


def link_desk() -> LinkDesk:
    """Raises: errors.NotFound: links are not set up in this deployment."""
    desk = deps().link_desk()
    if desk is None:
        raise errors.NotFound("One-click links are not set up in this deployment.")
    return desk


@links.route("/actions/{token}", methods=["GET"])
@handled
def confirm_link(token: str) -> Response:
    """The confirmation page of an emailed action: changes nothing."""
    return html_response(link_desk().confirm(unquote(token)))


@links.route("/actions/{token}", methods=["POST"], content_types=LINK_CONTENT_TYPES)
@handled
def perform_link(token: str) -> Response:
    """Perform an emailed action, once."""
    return html_response(link_desk().perform(unquote(token)))
