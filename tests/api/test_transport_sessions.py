"""A legacy `Mcp-Session-Id` (issue 31) is shown with each call in the session views, as
an attribute of the call: it is no budget boundary (the MCP side keys a session on it
only under `session_from: transport`, and then sends it as the session id). Memory and
moto, whose codec keeps it in the last calls' compact records."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.api.conftest import Api, body, running_api
from tests.support import FixedClock


@pytest.fixture(params=["memory", "dynamodb"])
def either(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    with running_api(clock, str(request.param)) as api:
        yield api


def test_each_call_shows_the_transport_session_it_came_over(either: Api) -> None:
    """Defect class: a detail the MCP side knows (which connection a call came over)
    made a budget boundary, or dropped, instead of shown."""
    for transport in ("conn-1", "conn|2", None):
        extra = {} if transport is None else {"transport_session_id": transport}
        answer = either.check(None, session_id="derived:agent", tool="delete_tag", **extra)
        assert answer.status_code == 200, body(answer)
    view = body(either.get("/v1/sessions/derived:agent"))
    assert view["categories"]["write"]["used"] == 3  # one budget across connections
    shown = [call.get("transport_session_id") for call in view["last_calls"]]
    assert shown == ["conn-1", "conn|2", None]


def test_a_malformed_transport_session_names_the_field(either: Api) -> None:
    answer = either.check(None, session_id="s", tool="delete_tag", transport_session_id="a b")
    assert answer.status_code == 400
    assert body(answer)["error"]["field"] == "transport_session_id"
