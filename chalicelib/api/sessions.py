"""A session's admin routes: show, list those in trouble, raise and lower a limit,
suspend, resume and reset."""

from __future__ import annotations

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import (
    deps,
    path_key,
    path_session,
    reader,
    reader_and_query,
)
from chalicelib.api.deferred import admin_requests
from chalicelib.api.operator_routes import (
    Change,
    lower_request,
    operator_routes,
    raise_request,
    reason,
)
from chalicelib.api.responses import handled, json_response

sessions = Blueprint(__name__)


@sessions.route("/v1/sessions", methods=["GET"], authorizer=bearer)
@handled
def list_sessions() -> Response:
    """The sessions blocked or suspended since a time (default: the last 24 h)."""
    who, params = reader_and_query(sessions.current_request)
    parsed = admin_requests.parse_sessions_query(params, deps().clock())
    return json_response(deps().admin.list_sessions(who, parsed))


@sessions.route("/v1/sessions/{session_id}", methods=["GET"], authorizer=bearer)
@handled
def show_session(session_id: str) -> Response:
    """A session's counters, limits, state and last calls."""
    who = reader(sessions.current_request)
    return json_response(deps().admin.show(path_key(who, session_id)))


operator_routes(
    sessions,
    "/v1/sessions/{session_id}",
    "session",
    lambda who, raw: path_session(raw),
    lambda container: container.admin,
    {
        "raise": Change(
            "Raise one category's limit for this session, at once.",
            raise_request,
            lambda admin: admin.raise_limit,
        ),
        "lower": Change(
            "Bring a raised limit back down to the base.", lower_request, lambda admin: admin.lower
        ),
        "suspend": Change(
            "Kill switch: refuse every check of this session until resumed.",
            reason,
            lambda admin: admin.suspend,
        ),
        "resume": Change("Lift a suspension.", reason, lambda admin: admin.resume),
        "reset": Change("Zero this session's counters.", reason, lambda admin: admin.reset),
    },
)
