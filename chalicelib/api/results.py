"""Exactly-once writes: the MCP side keeps an allowed call's result here after the tool
ran, so that a retry under the same call id gets it instead of running the tool again."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote

from chalice.app import Blueprint, Response

from chalicelib.api.authorizer import bearer
from chalicelib.api.context import deps, query, server_caller
from chalicelib.api.deferred import kept_results, validation
from chalicelib.api.responses import handled, json_response

if TYPE_CHECKING:
    from chalicelib.api.schemas import ResultKept, ResultRead

results = Blueprint(__name__)


@results.route("/v1/results/{call_id}", methods=["PUT"], authorizer=bearer)
@handled
def put_result(call_id: str) -> Response:
    """Keep the result of a call this session allowed; the first store wins."""
    request = results.current_request
    identity = server_caller(request)
    raw = request.raw_body
    body = validation.parse_json_object(
        raw.encode("utf-8") if isinstance(raw, str) else raw, kept_results.MAX_RESULT_BODY_BYTES
    )
    # As the session routes do: a gateway may hand the path parameter still encoded.
    put = kept_results.parse_result(unquote(call_id), body)
    outcome, kept = deps().result_desk.store(identity, put)
    answer: ResultKept = {
        "call_id": put.call_id,
        "session_id": put.session_id,
        "tool": put.tool,
        "stored": outcome.value,
        "truncated": kept.truncated,
        "digest": kept.digest,
        "size": kept.size,
    }
    return json_response(answer, 201 if outcome.value == "stored" else 200)


@results.route("/v1/results/{call_id}", methods=["GET"], authorizer=bearer)
@handled
def read_result(call_id: str) -> Response:
    """What a copy of an allowed call would be answered with now: its kept result, or
    that it is still running (the MCP side's wait reads this; a check would use up the
    call's duplicates)."""
    request = results.current_request
    identity = server_caller(request)
    session_id = kept_results.session_param(query(request))
    call_id = kept_results.call_id_param(unquote(call_id))
    replay = deps().result_desk.read(identity, session_id, call_id)
    answer: ResultRead = {"call_id": call_id, "session_id": session_id, "replay": replay.to_json()}
    return json_response(answer)
