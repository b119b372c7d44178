"""Issue 11, item 6: tokens through the admin API. An admin creates, lists and revokes the
tokens of its own tenant; the secret is shown once; every change is audited."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import ADMIN, Api, body, running_api
from tests.support import FixedClock

SERVER_TOKEN = {"role": "server", "name": "articles MCP server", "principals": ["bot-*", "ed"]}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def create(api: Api, payload: dict[str, Any]) -> dict[str, Any]:
    response = api.admin("/v1/tokens", payload)
    assert response.status_code == 201, response.body
    created: dict[str, Any] = body(response)
    return created


def tenant_events(api: Api) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = body(api.get("/v1/audit"))["events"]
    # The tenant-wide trail is newest first: oldest first here.
    return [e for e in reversed(events) if e["type"].startswith("token_")]


@pytest.fixture
def cached_api(clock: FixedClock) -> Iterator[Api]:
    """The API with the production token cache (60 s per token, per container)."""
    with running_api(clock, "memory", token_cache_seconds=60) as api:
        yield api


def test_create_answers_the_record_and_the_secret_once(api: Api) -> None:
    response = api.admin("/v1/tokens", SERVER_TOKEN)
    assert response.status_code == 201 and response.headers["Cache-Control"] == "no-store"
    created = body(response)
    assert re.fullmatch(rf"mcpq_{created['token_id']}_[A-Za-z0-9_-]{{40,}}", created["token"])
    assert created == {
        "token_id": created["token_id"],
        "tenant": "demo",  # the calling admin's
        "role": "server",
        "name": "articles MCP server",
        "principals": ["bot-*", "ed"],
        "created_at": "2026-12-02T12:00:00Z",
        "revoked_at": None,
        "token": created["token"],
    }
    listed = api.get("/v1/tokens")
    assert listed.status_code == 200
    assert body(listed)["tokens"] == [{k: v for k, v in created.items() if k != "token"}]
    assert created["token"] not in listed.body.decode()
    assert "hash" not in listed.body.decode()


def test_a_created_token_works_at_once_despite_the_token_cache(cached_api: Api) -> None:
    api = cached_api
    admin = create(api, {"role": "admin", "name": "second admin"})["token"]
    assert api.get("/v1/tokens", bearer(admin)).status_code == 200
    server = create(api, SERVER_TOKEN)["token"]
    allowed = api.check(bearer(server), session_id="s1", tool="delete_tag", principal="bot-1")
    assert allowed.status_code == 200, allowed.body
    refused = api.check(bearer(server), session_id="s2", tool="delete_tag", principal="bot")
    assert refused.status_code == 403
    assert body(refused)["error"]["code"] == "principal_not_allowed"
    assert api.get("/v1/tokens", bearer(server)).status_code == 403  # a server token


def test_an_unbound_server_token_acts_only_as_itself(api: Api) -> None:
    created = create(api, {"role": "server", "name": "plain"})
    assert created["principals"] == []
    headers = bearer(created["token"])
    assert api.check(headers, session_id="s1", tool="delete_tag").status_code == 200
    session = body(api.get("/v1/sessions/s1"))
    assert session["principal"] == f"token:{created['token_id']}"
    claim = api.check(headers, session_id="s1", tool="delete_tag", principal="bot")
    assert claim.status_code == 403


def test_the_tenant_comes_from_the_calling_token(api: Api) -> None:
    _, acme = api.token("acme", "admin")
    response = api.admin("/v1/tokens", {**SERVER_TOKEN, "tenant": "demo"}, acme)
    assert response.status_code == 400 and body(response)["error"]["field"] == "tenant"
    theirs = create_as(api, acme, SERVER_TOKEN)
    assert theirs["tenant"] == "acme"
    ours = create(api, {"role": "admin", "name": "ours"})
    assert [t["token_id"] for t in body(api.get("/v1/tokens"))["tokens"]] == [ours["token_id"]]
    listed = body(api.get("/v1/tokens", acme))["tokens"]
    assert theirs["token_id"] in [t["token_id"] for t in listed]
    assert ours["token_id"] not in [t["token_id"] for t in listed]


def create_as(api: Api, headers: dict[str, str], payload: dict[str, Any]) -> dict[str, Any]:
    response = api.admin("/v1/tokens", payload, headers)
    assert response.status_code == 201, response.body
    created: dict[str, Any] = body(response)
    return created


def test_revoke_refuses_the_token_and_again_changes_nothing(api: Api) -> None:
    created = create(api, SERVER_TOKEN)
    token_id, headers = created["token_id"], bearer(created["token"])
    assert api.check(headers, session_id="s1", tool="delete_tag").status_code == 200
    api.clock.advance(5)
    revoked = api.client.http.delete(f"/v1/tokens/{token_id}", headers=ADMIN)
    assert revoked.status_code == 200
    shown = body(revoked)
    assert shown["revoked_at"] == "2026-12-02T12:00:05Z" and "token" not in shown
    assert api.check(headers, session_id="s1", tool="delete_tag").status_code == 403
    api.clock.advance(5)
    again = api.client.http.delete(f"/v1/tokens/{token_id}", headers=ADMIN)
    assert again.status_code == 200 and body(again) == shown
    assert [e["type"] for e in tenant_events(api)] == ["token_created", "token_revoked"]


@pytest.mark.parametrize("token_id", ["0123456789ab", "nope", "ABCDEF012345", "dev-admin"])
def test_revoking_an_unknown_token_is_404(api: Api, token_id: str) -> None:
    response = api.client.http.delete(f"/v1/tokens/{token_id}", headers=ADMIN)
    assert response.status_code == 404 and body(response)["error"]["code"] == "not_found"


def test_another_tenants_token_is_404_and_keeps_working(api: Api) -> None:
    token_id, acme_server = api.token("acme", "server")
    response = api.client.http.delete(f"/v1/tokens/{token_id}", headers=ADMIN)
    assert response.status_code == 404
    assert api.check(acme_server, session_id="s1", tool="delete_tag").status_code == 200
    assert tenant_events(api) == []


def test_every_change_is_audited_without_the_secret(api: Api) -> None:
    created = create(api, SERVER_TOKEN)
    api.clock.advance(1)
    api.client.http.delete(f"/v1/tokens/{created['token_id']}", headers=ADMIN)
    events = tenant_events(api)
    assert [e["type"] for e in events] == ["token_created", "token_revoked"]
    public = {k: v for k, v in created.items() if k != "token"}
    assert events[0]["after"] == public
    assert events[1]["after"] == {**public, "revoked_at": "2026-12-02T12:00:01Z"}
    for event in events:
        assert event["actor"] == "dev-admin (admin)" and event["session_id"] is None
        assert event["tenant"] == "demo"
    assert created["token"] not in json.dumps(events)


LONG = "x" * 65
BAD_BODIES: list[tuple[dict[str, Any], str]] = [
    ({"name": "n"}, "role"),
    ({"role": "root", "name": "n"}, "role"),
    ({"role": 1, "name": "n"}, "role"),
    ({"role": ["server"], "name": "n"}, "role"),
    ({"role": "server"}, "name"),
    ({"role": "server", "name": ""}, "name"),
    ({"role": "server", "name": "   "}, "name"),
    ({"role": "server", "name": LONG}, "name"),
    ({"role": "server", "name": 7}, "name"),
    ({"role": "server", "name": "clear \x1b[2J"}, "name"),
    ({"role": "server", "name": "\u202eevil"}, "name"),
    ({"role": "server", "name": "n", "principals": []}, "principals"),
    ({"role": "server", "name": "n", "principals": "bot"}, "principals"),
    ({"role": "server", "name": "n", "principals": [f"p{i}" for i in range(33)]}, "principals"),
    ({"role": "server", "name": "n", "principals": [1]}, "principals"),
    ({"role": "server", "name": "n", "principals": [""]}, "principals"),
    ({"role": "server", "name": "n", "principals": ["a b"]}, "principals"),
    ({"role": "server", "name": "n", "principals": ["é"]}, "principals"),
    ({"role": "server", "name": "n", "principals": ["x" * 257]}, "principals"),
    ({"role": "server", "name": "n", "principals": ["token:*"]}, "principals"),
    ({"role": "admin", "name": "n", "principals": ["bot"]}, "principals"),
    ({"role": "server", "name": "n", "tenant": "acme"}, "tenant"),
]


@pytest.mark.parametrize(("payload", "field"), BAD_BODIES, ids=[f for _, f in BAD_BODIES])
def test_every_field_is_validated_naming_it(api: Api, payload: dict[str, Any], field: str) -> None:
    response = api.admin("/v1/tokens", payload)
    assert response.status_code == 400, response.body
    error = body(response)["error"]
    assert error["code"] == "invalid_request" and error["field"] == field
    assert body(api.get("/v1/tokens"))["tokens"] == []  # nothing was created


def test_limits_are_inclusive(api: Api) -> None:
    patterns = ["x" * 256, *(f"p{i}" for i in range(31))]
    created = create(api, {"role": "server", "name": "y" * 64, "principals": patterns})
    assert created["principals"] == patterns and created["name"] == "y" * 64
    repeated = create(api, {"role": "server", "name": "é ✓", "principals": ["a", "a"]})
    assert repeated["principals"] == ["a"]
