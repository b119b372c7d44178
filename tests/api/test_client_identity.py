"""Issue 20, "Who and where": the MCP client a check names (name, version, OAuth client
id) is stored on the session and shown by the session view and the listing, on memory
and on moto's DynamoDB; a malformed `client` answers 400 naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import Api, body, running_api
from tests.support import FixedClock

CLIENT = {"name": "claude-code", "version": "1.0.71", "oauth_client_id": "cli-4711"}
WRITE = {"session_id": "s-who", "tool": "delete_tag", "server": "inventory"}


@pytest.fixture(params=["memory", "dynamodb"])
def either(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    with running_api(clock, str(request.param)) as api:
        yield api


def test_the_session_shows_the_client_it_was_called_from(either: Api) -> None:
    assert either.check(None, **WRITE, client=CLIENT).status_code == 200
    view = body(either.get("/v1/sessions/s-who"))
    assert view["server"] == "inventory"
    assert view["client"] == CLIENT


def test_a_later_check_naming_a_client_replaces_it_and_one_without_keeps_it(
    either: Api,
) -> None:
    either.check(None, **WRITE, client=CLIENT)
    either.check(None, **WRITE, client={"name": "cursor"})
    either.check(None, **WRITE)
    view = body(either.get("/v1/sessions/s-who"))
    assert view["client"] == {"name": "cursor", "version": None, "oauth_client_id": None}


def test_a_session_no_client_named_shows_none(either: Api) -> None:
    either.check(None, **WRITE)
    assert body(either.get("/v1/sessions/s-who"))["client"] is None


def test_the_listing_shows_the_server_and_client_of_each_session(either: Api) -> None:
    for _ in range(16):  # the default policy's 15 writes, then a refusal: a trouble mark
        either.check(None, **WRITE, client=CLIENT)
        either.check(None, session_id="s-anon", tool="delete_tag")
    listed = body(either.get("/v1/sessions"))["sessions"]
    # The CLI's and the console's column read these fields; neither derives them again.
    assert {s["session_id"]: (s["server"], s["client"]) for s in listed} == {
        "s-who": ("inventory", CLIENT),
        "s-anon": (None, None),
    }


@pytest.mark.parametrize(
    ("client", "field"),
    [
        ("claude", "client"),
        ({"name": "claude", "flavour": "x"}, "client.flavour"),
        ({"name": ""}, "client.name"),
        ({"name": 7}, "client.name"),
        ({"version": "x" * 65}, "client.version"),
        ({"oauth_client_id": "a\u202eb"}, "client.oauth_client_id"),
        ({"name": "bad\x1b[31m"}, "client.name"),
    ],
)
def test_a_malformed_client_answers_400_naming_the_field(api: Api, client: Any, field: str) -> None:
    response = api.check(None, **WRITE, client=client)
    assert response.status_code == 400
    error = body(response)["error"]
    assert (error["code"], error["field"]) == ("invalid_request", field)
    assert f"'{field}'" in error["message"]


def test_the_email_names_the_server_in_its_subject_and_the_client_in_its_body(
    either: Api,
) -> None:
    for _ in range(16):  # the default policy's 15 writes, then a refusal
        either.check(None, **WRITE, client=CLIENT)
    [(_, text, subject, _, _)] = either.sent()
    assert subject is not None and subject.startswith("[mcp-quota] demo, server inventory: ")
    assert "client:     claude-code 1.0.71, OAuth client cli-4711" in text


def test_a_long_server_name_leaves_room_for_the_session_in_the_subject(api: Api) -> None:
    for _ in range(16):
        api.check(None, **{**WRITE, "server": "x" * 128})
    [(_, _, subject, _, _)] = api.sent()
    assert subject is not None and len(subject) <= 100 and "session s-who" in subject
