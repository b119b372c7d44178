"""Issue 10, item 2: every field of every route's body and query, fed arbitrary JSON
values (huge integers, lists and objects where strings belong, unshowable text): the
answer is never a 5xx, and every 400 names the field."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import ADMIN, Api, body


class Huge:
    """An integer literal longer than Python's int-from-string limit (4,300 digits)."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


HUGE = st.integers(min_value=4301, max_value=6000).map(Huge)
TEXT = st.text(max_size=12) | st.sampled_from(["\ud800", "\x1b]0;pwned\x07", "\u202eevil"])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=6,
)

# (method, path, the body's fields or None for a query-only route, the query's fields)
ROUTES: list[tuple[str, str, list[str], list[str]]] = [
    (
        "POST",
        "/v1/check",
        [
            "session_id",
            "tool",
            "category",
            "annotations",
            "principal",
            "server",
            "call_id",
            "fail_open",
            "lease",
        ],
        [],
    ),
    ("POST", "/v1/leases/return", ["session_id", "lease", "unused"], []),
    (
        "POST",
        "/v1/sessions/s1/raise",
        ["category", "limit", "add", "reason", "expires_in_seconds"],
        [],
    ),
    ("POST", "/v1/sessions/s1/lower", ["category", "reason"], []),
    ("GET", "/v1/sessions", [], ["state", "since", "limit", "next"]),
    ("POST", "/v1/sessions/s1/suspend", ["reason"], []),
    ("POST", "/v1/sessions/s1/resume", ["reason"], []),
    ("POST", "/v1/sessions/s1/reset", ["reason"], []),
    (
        "POST",
        "/v1/grants",
        ["principal", "category", "limit", "starts_at", "ends_at", "reason"],
        [],
    ),
    ("GET", "/v1/audit", [], ["session_id", "since", "limit", "next"]),
    ("POST", "/v1/principals/bot/raise", ["category", "limit", "add", "reason"], []),
    ("POST", "/v1/principals/bot/suspend", ["reason"], []),
    ("POST", "/v1/principals/bot/resume", ["reason"], []),
    ("POST", "/v1/principals/bot/reset", ["reason"], []),
    ("POST", "/v1/tokens", ["role", "name", "principals"], []),
]
VALID: dict[str, Any] = {
    "session_id": "s1",
    "tool": "delete_tag",
    "category": "write",
    "limit": 40,
    "reason": "planned migration",
    "principal": "bot",
    "starts_at": "2026-12-02T00:00:00Z",
    "ends_at": "2026-12-03T00:00:00Z",
    "role": "server",
    "name": "fuzzed server",
    "principals": ["bot-*"],
    "unused": 2,
}
VALID_LEASE_ID = "read.abcdef.3.0.0"  # a lease id's shape (a check's `lease` is a count)


def _raw_json(value: Any) -> str:
    return "7" * value.digits if isinstance(value, Huge) else json.dumps(value)


def _assert_answer(response: Any) -> None:
    assert response.status_code < 500, response.body
    if response.status_code == 400:
        error = body(response)["error"]
        # A page token is a field of its own kind: its code names it (issue 18).
        expected = "bad_page_token" if error.get("field") == "next" else "invalid_request"
        assert error["code"] == expected and error["field"], error


@pytest.mark.parametrize(("method", "path", "fields", "query"), ROUTES)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_value_in_any_field_is_never_a_5xx(
    api: Api, method: str, path: str, fields: list[str], query: list[str], data: st.DataObject
) -> None:
    api.check(session_id="s1", tool="delete_tag")
    if method == "POST":
        field = data.draw(st.sampled_from(fields))
        value = data.draw(JSON | HUGE)
        others = {k: VALID[k] for k in fields if k in VALID and k != field}
        if field in ("limit", "add"):
            others.pop("add" if field == "limit" else "limit", None)
        if path == "/v1/leases/return" and field != "lease":
            others["lease"] = VALID_LEASE_ID
        pieces = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in others.items()]
        pieces.append(f"{json.dumps(field)}: {_raw_json(value)}")
        raw = "{" + ", ".join(pieces) + "}"
        headers = None if path in ("/v1/check", "/v1/leases/return") else ADMIN
        response = api.post(path, raw, headers)
    else:
        field = data.draw(st.sampled_from(query))
        value = data.draw(st.text(max_size=12) | st.integers().map(str))
        response = api.get(f"{path}?{urlencode({field: value})}")
    _assert_answer(response)


@pytest.mark.parametrize("field", ["category", "limit", "add", "reason"])
@pytest.mark.parametrize("value", [[], {}, ["write"], {"a": 1}, True, 1.5])
def test_lists_and_objects_where_a_scalar_belongs_name_the_field(
    api: Api, field: str, value: Any
) -> None:
    api.check(session_id="s1", tool="delete_tag")
    payload = {"category": "write", "add": 5, "reason": "ok", field: value}
    if field == "limit":
        payload.pop("add")
    response = api.admin("/v1/sessions/s1/raise", payload)
    assert response.status_code == 400
    assert body(response)["error"]["field"] == field


def test_an_integer_past_the_digit_limit_is_a_400_not_a_500(api: Api) -> None:
    raw = '{"session_id": "s1", "tool": "delete_tag", "call_id": ' + "9" * 5000 + "}"
    response = api.post("/v1/check", raw)
    assert response.status_code in (400, 413)
    assert body(response)["error"]["field"] == "body" or response.status_code == 413
    small = '{"category": "write", "add": ' + "9" * 4400 + ', "reason": "x"}'
    response = api.admin("/v1/sessions/s1/raise", small)
    assert response.status_code == 400 and body(response)["error"]["field"] == "body"


@pytest.mark.parametrize(
    "reason", ["\ud800 lone", "title \x1b]0;pwned\x07", "clear \x1b[2J", "cr\rlf", "\u202eevil"]
)
def test_unshowable_reasons_are_refused_naming_the_field(api: Api, reason: str) -> None:
    api.check(session_id="s1", tool="delete_tag")
    for action in ("suspend", "resume", "reset"):
        response = api.admin(f"/v1/sessions/s1/{action}", json.dumps({"reason": reason}))
        assert response.status_code == 400, action
        assert body(response)["error"]["field"] == "reason"
