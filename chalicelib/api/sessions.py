"""A session's admin routes: show, list those in trouble, raise and lower a limit,
suspend, resume and reset."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import (
    deps,
    operator_and_body,
    path_key,
    path_session,
    reader,
    reader_and_query,
)
from chalicelib.api.responses import handled, json_response
from chalicelib.lazy import lazy_module

if TYPE_CHECKING:
    from chalicelib.admin import requests as admin_requests
else:
    admin_requests = lazy_module("chalicelib.admin.requests")

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


@sessions.route("/v1/sessions/{session_id}/raise", methods=["POST"], authorizer=bearer)
@handled
def raise_session(session_id: str) -> Response:
    """Raise one category's limit for this session, at once."""
    who, body = operator_and_body(sessions.current_request)
    parsed = admin_requests.parse_raise(body, deps().policy)
    return json_response(deps().admin.raise_limit(who, path_session(session_id), parsed))


@sessions.route("/v1/sessions/{session_id}/lower", methods=["POST"], authorizer=bearer)
@handled
def lower_session(session_id: str) -> Response:
    """Bring a raised limit back down to the base."""
    who, body = operator_and_body(sessions.current_request)
    parsed = admin_requests.parse_lower(body, deps().policy)
    return json_response(deps().admin.lower(who, path_session(session_id), parsed))


@sessions.route("/v1/sessions/{session_id}/suspend", methods=["POST"], authorizer=bearer)
@handled
def suspend_session(session_id: str) -> Response:
    """Kill switch: refuse every check of this session until resumed."""
    who, body = operator_and_body(sessions.current_request)
    reason = admin_requests.parse_reason(body)
    return json_response(deps().admin.suspend(who, path_session(session_id), reason))


@sessions.route("/v1/sessions/{session_id}/resume", methods=["POST"], authorizer=bearer)
@handled
def resume_session(session_id: str) -> Response:
    """Lift a suspension."""
    who, body = operator_and_body(sessions.current_request)
    reason = admin_requests.parse_reason(body)
    return json_response(deps().admin.resume(who, path_session(session_id), reason))


@sessions.route("/v1/sessions/{session_id}/reset", methods=["POST"], authorizer=bearer)
@handled
def reset_session(session_id: str) -> Response:
    """Zero this session's counters."""
    who, body = operator_and_body(sessions.current_request)
    reason = admin_requests.parse_reason(body)
    return json_response(deps().admin.reset(who, path_session(session_id), reason))
