"""Page tokens are taken only as the service issued them: anything else, whatever its
shape or size, answers 400 `bad_page_token`, never a 500 and never another scope's page."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest
from chalice.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import app as app_module
from chalicelib.storage import page_tokens
from chalicelib.wiring import Container
from tests.api.conftest import Api, body, running_api
from tests.support import ROOT, FixedClock, client_for, fresh_settings, provisioned


@contextmanager
def dynalite_api(clock: FixedClock, endpoint: str) -> Iterator[Api]:
    """The API on dynalite, which (like DynamoDB, unlike moto) checks a query's start key."""
    settings = fresh_settings(f"p{uuid.uuid4().hex[:8]}", backend="dynamodb")
    client = client_for(endpoint)
    provisioned(client, settings)
    container = Container(settings=settings, clock=clock)
    container.dynamodb = client
    container.token_dynamodb = client  # the token store has a client of its own
    app_module.reset_dependencies(container)
    try:
        with Client(app_module.app, stage_name="local", project_dir=str(ROOT)) as test_client:
            yield Api(test_client, container, clock)
    finally:
        app_module.reset_dependencies(None)


@pytest.fixture(params=["memory", "dynamodb", pytest.param("dynalite", marks=pytest.mark.dynalite)])
def any_api(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    """The API on each backend: the page token is each adapter's own."""
    if request.param == "dynalite":
        with dynalite_api(clock, request.getfixturevalue("dynalite_endpoint")) as api:
            yield api
    else:
        with running_api(clock, request.param) as api:
            yield api


def _events(api: Api, session: str, count: int, headers: dict[str, str] | None = None) -> None:
    for i in range(count):
        api.clock.advance(1)
        assert api.admin(
            f"/v1/sessions/{session}/suspend", {"reason": f"r{i}"}, headers
        ).status_code in (200, 404)


def _audit(api: Api, token: str, session: str = "s", headers: dict[str, str] | None = None) -> Any:
    return api.get(f"/v1/audit?session_id={session}&limit=2&next={quote(token, safe='')}", headers)


def _refused(response: Any) -> bool:
    if response.status_code != 400:
        return False
    error = body(response)["error"]
    return bool(error["code"] == "bad_page_token" and error["field"] == "next")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


def _issued(api: Api, session: str = "s", headers: dict[str, str] | None = None) -> str:
    api.check(session_id=session, tool="search_articles")
    _events(api, session, 3, headers)
    page = body(api.get(f"/v1/audit?session_id={session}&limit=2", headers))
    assert len(page["events"]) == 2 and page["next"]
    return str(page["next"])


def test_an_issued_token_pages_and_is_short_and_opaque(any_api: Api) -> None:
    token = _issued(any_api)
    assert len(token) <= 64 and "demo" not in token
    second = body(_audit(any_api, token))
    assert [e["reason"] for e in second["events"]] == ["r2"]


@pytest.mark.parametrize(
    "token",
    [
        # Deeply nested JSON: the DynamoDB adapter answered 500 (RecursionError).
        _b64(b"[" * 1500),
        _b64(b'{"pk": ' * 250),
        "A" * 100_000,  # huge
        "",
        "=",
        _b64(
            json.dumps({"pk": {"S": "demo#s"}, "sk": {"S": "1764765600000#000000abcdef"}}).encode()
        ),
        _b64(b"demo\ns\n1764765600000#000000abcdef"),
        "a1." + "0" * 13 + "0" * 12 + "." + "0" * 16,  # the format, bound to nothing
        "\u202e\u0000",
        "%00",
    ],
)
def test_tokens_the_service_did_not_issue_are_a_named_400(any_api: Api, token: str) -> None:
    _issued(any_api)
    assert _refused(_audit(any_api, token))


def test_a_token_is_bound_to_its_tenant_and_session(any_api: Api) -> None:
    token = _issued(any_api)
    _, other_admin = any_api.token("acme", "admin")
    _issued(any_api, headers=other_admin)  # acme has a session "s" of its own, with events
    assert _refused(_audit(any_api, token, headers=other_admin))
    assert _refused(_audit(any_api, token, session="other"))
    assert _refused(any_api.get(f"/v1/audit?next={quote(token)}"))  # the tenant's own events
    # Tampered in any one character: refused, or (where it is still a token of this
    # session) a page of this session only.
    for i, char in enumerate(token):
        changed = token[:i] + ("1" if char != "1" else "2") + token[i + 1 :]
        answer = _audit(any_api, changed)
        assert _refused(answer) or all(
            e["session_id"] == "s" and e["tenant"] == "demo" for e in body(answer)["events"]
        )


def test_a_bad_sessions_listing_token_is_a_named_400(any_api: Api) -> None:
    for token in ("x", "-1", "1" * 7, "A" * 5000):
        assert _refused(any_api.get(f"/v1/sessions?next={quote(token)}"))


TOKENS = (
    st.text(max_size=300)
    | st.binary(max_size=300).map(_b64)
    | st.recursive(
        st.none() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    ).map(lambda value: _b64(json.dumps(value).encode()))
    | st.from_regex(r"a1\.[0-9]{13}[0-9a-f]{12}\.[0-9a-f]{16}", fullmatch=True)
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(token=TOKENS)
def test_any_audit_token_answers_200_or_400_never_500(any_api: Api, token: str) -> None:
    answer = _audit(any_api, token)
    assert answer.status_code in (200, 400), answer.body
    if answer.status_code == 400:
        assert _refused(answer)
    else:
        assert all(e["tenant"] == "demo" and e["session_id"] == "s" for e in body(answer)["events"])


def test_a_token_from_before_since_starts_at_since(any_api: Api) -> None:
    # Well-formed and bound to this listing, but older than `since`: DynamoDB refuses an
    # ExclusiveStartKey outside the key condition, so the page starts at `since` instead.
    _issued(any_api)
    early = page_tokens.encode("demo", "s", "0000000000001#000000000000")
    answer = any_api.get(f"/v1/audit?session_id=s&since=2026-12-02T12:00:02Z&next={early}")
    assert answer.status_code == 200, answer.body
    assert [e["reason"] for e in body(answer)["events"]] == ["r1", "r2"]


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(token=TOKENS | st.integers().map(str))
def test_any_sessions_token_answers_200_or_400_never_500(api: Api, token: str) -> None:
    answer = api.get(f"/v1/sessions?next={quote(token, safe='')}")
    assert answer.status_code == 200 or _refused(answer), answer.body
