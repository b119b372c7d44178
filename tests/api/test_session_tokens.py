"""Sessions the service mints (issue 31): a check that names no session sends the key
its MCP side derived, with `mint_session`; the answer carries a `session_token` the
service signed for that session, bound to tenant and principal, expiring after the idle
timeout and renewed as it is used. A client that echoes it stays in that session, over a
fresh connection too; a forged token, or one minted for another principal or tenant, is
refused with a 400 naming the problem. On the memory backend and moto."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import Api, body, running_api
from tests.support import FixedClock

SECRET = "k" * 40  # the link key, from which the service signs session tokens
IDLE = 600
WRITES = 15  # the default policy's write limit


@pytest.fixture(params=["memory", "dynamodb"])
def keyed(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    with running_api(
        clock, str(request.param), link_secret=SECRET, idle_timeout_seconds=IDLE
    ) as api:
        yield api


def write(api: Api, session: str, headers: dict[str, str] | None = None, **extra: Any) -> Any:
    return api.check(headers, session_id=session, tool="delete_tag", **extra)


def minted(api: Api, session: str = "derived:one", **extra: Any) -> str:
    answer = write(api, session, mint_session=True, **extra)
    assert answer.status_code == 200, body(answer)
    token = body(answer)["session_token"]
    assert isinstance(token, str) and token.startswith("mqs1-")
    return token


def test_a_check_asking_for_a_session_gets_one_and_a_named_session_none(keyed: Api) -> None:
    token = minted(keyed)
    named = write(keyed, "run-42")
    assert "session_token" not in body(named)
    assert body(write(keyed, "derived:one", session_token=token))["session_token"]


def test_a_token_echoed_back_keeps_the_budget_across_a_fresh_connection(keyed: Api) -> None:
    """Defect class: a session that lives only as long as one connection (each new
    connection, or client name, derives another fallback and starts a fresh budget)."""
    token = minted(keyed, "derived:first-connection")
    for i in range(WRITES - 1):
        # Another connection derives another key; the echoed token names the session.
        answer = write(keyed, f"derived:connection-{i}", session_token=token)
        assert answer.status_code == 200, body(answer)
        assert body(answer)["session_id"] == "derived:first-connection"
        token = body(answer)["session_token"]  # renewed
    assert body(answer)["used"] == WRITES
    refused = write(keyed, "derived:yet-another", session_token=token)
    assert refused.status_code == 429
    assert body(refused)["session_id"] == "derived:first-connection"
    assert body(refused)["session_token"]
    # Without the token, the fallback is a session of its own.
    assert write(keyed, "derived:yet-another").status_code == 200


def test_a_forged_token_is_refused_naming_the_problem_and_counts_nothing(keyed: Api) -> None:
    """Defect class: an unverifiable token taken at its word (or refused as an unknown
    field, which names the wrong problem)."""
    token = minted(keyed)
    version, payload, mac = token.split(".")
    for forged in (f"{version}.{payload}.{mac[:-2]}xx", "mqs1-abcd.payload.sig", "mqs1-"):
        answer = write(keyed, "derived:one", session_token=forged)
        assert answer.status_code == 400, body(answer)
        error = body(answer)["error"]
        assert error["code"] == "session_token_invalid"
        assert error["field"] == "session_token"
        assert "not a session this service minted" in error["message"]
    assert body(keyed.get("/v1/sessions/derived:one"))["categories"]["write"]["used"] == 1


def test_a_token_minted_for_principal_a_used_by_principal_b_is_refused(keyed: Api) -> None:
    """Defect class: a session token that is a bearer pass into anyone's session."""
    _, server = keyed.token("demo", "server", ("alice", "bob"))
    token = minted(keyed, "derived:alice", headers=server, principal="alice")
    answer = write(keyed, "derived:bob", server, session_token=token, principal="bob")
    assert answer.status_code == 400, body(answer)
    error = body(answer)["error"]
    assert error["code"] == "session_token_other_principal"
    assert "'alice'" in error["message"] and "'bob'" in error["message"]
    # Nothing counted in either session; alice's token still works for alice.
    assert keyed.get("/v1/sessions/derived:bob").status_code == 404
    again = write(keyed, "derived:x", server, session_token=token, principal="alice")
    assert body(again)["used"] == 2


def test_a_token_of_another_tenant_is_refused(keyed: Api) -> None:
    token = minted(keyed)
    _, other = keyed.token("other-tenant", "server")
    answer = write(keyed, "derived:one", other, session_token=token)
    assert answer.status_code == 400
    assert body(answer)["error"]["code"] == "session_token_invalid"


def test_the_token_expires_after_the_idle_timeout_and_use_renews_it(
    keyed: Api, clock: FixedClock
) -> None:
    token = minted(keyed, "derived:idle")
    clock.advance(IDLE - 1)
    token = body(write(keyed, "derived:other", session_token=token))["session_token"]
    clock.advance(IDLE - 1)  # past the first token's expiry: the renewed one holds
    kept = write(keyed, "derived:other", session_token=token)
    assert body(kept)["session_id"] == "derived:idle"
    assert body(kept)["used"] == 3
    clock.advance(IDLE + 1)  # idle: the session has ended, as any would
    after = write(keyed, "derived:fresh", session_token=body(kept)["session_token"])
    assert after.status_code == 200
    assert body(after)["session_id"] == "derived:fresh"
    assert body(after)["used"] == 1
    assert body(after)["session_token"] != body(kept)["session_token"]


def test_a_malformed_mint_session_names_the_field(keyed: Api) -> None:
    answer = write(keyed, "derived:one", mint_session="yes")
    assert answer.status_code == 400
    assert body(answer)["error"]["field"] == "mint_session"


def test_without_a_signing_key_no_token_is_minted(api: Api) -> None:
    answer = write(api, "derived:one", mint_session=True)
    assert answer.status_code == 200
    assert "session_token" not in body(answer)
