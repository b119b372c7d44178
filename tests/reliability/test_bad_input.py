"""Bad input beyond what tests/api and tests/unit already cover: ids in URL paths with
control, unicode and expression syntax; oversized bodies and wrong content types on the
admin routes; and, over the in-process HTTP API, arbitrary check bodies."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import ADMIN, Api, body

ADMIN_POSTS = ["raise", "suspend", "resume", "reset"]


@pytest.mark.parametrize("raw", ["a\nb", "tab\there", "\x00", "caf\u00e9", "\u202eevil", " "])
def test_control_and_unicode_session_ids_in_paths_are_a_named_400(api: Api, raw: str) -> None:
    response = api.get(f"/v1/sessions/{quote(raw, safe='')}")
    assert response.status_code == 400
    assert body(response)["error"]["field"] == "session_id"


@pytest.mark.parametrize("raw", ["#pk", ":limit", "x)OR(#n<:one", "a=:x", "calls[0]", "%00"])
def test_expression_syntax_in_path_session_ids_is_only_data(api: Api, raw: str) -> None:
    assert api.check(session_id=raw, tool="delete_tag").status_code == 200
    response = api.get(f"/v1/sessions/{quote(raw, safe='')}")
    assert response.status_code == 200
    view = body(response)
    assert view["session_id"] == raw and view["categories"]["write"]["used"] == 1
    assert api.get(f"/v1/sessions/{quote(raw + 'x', safe='')}").status_code == 404


@pytest.mark.parametrize("tool", ["a:b", "x.y/z", "-", "#pk", "a OR b", "n_write"])
def test_expression_syntax_in_tool_names_never_reaches_an_expression(api: Api, tool: str) -> None:
    response = api.check(session_id="inject", tool=tool)
    assert response.status_code in (200, 400)
    if response.status_code == 400:
        assert body(response)["error"]["field"] == "tool"
    else:
        assert body(response)["tool"] == tool and body(response)["used"] == 1


@pytest.mark.parametrize("action", ADMIN_POSTS)
def test_admin_bodies_over_16_kib_are_413(api: Api, action: str) -> None:
    api.check(session_id="big", tool="delete_tag")
    response = api.admin(f"/v1/sessions/big/{action}", {"reason": "x" * 17000})
    assert response.status_code == 413
    assert body(response)["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize("action", ADMIN_POSTS)
def test_admin_posts_refuse_other_content_types(api: Api, action: str) -> None:
    headers = {**ADMIN, "Content-Type": "text/plain"}
    response = api.client.http.post(f"/v1/sessions/s/{action}", headers=headers, body="x")
    assert response.status_code == 415


@pytest.mark.parametrize("raw", ["", "null", "[]", '"reason"', "{", '{"reason": 5}'])
def test_admin_bodies_that_are_not_a_reason_object_are_400(api: Api, raw: str) -> None:
    response = api.admin("/v1/sessions/s/suspend", raw)
    assert response.status_code == 400 and body(response)["error"]["field"]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
FIELDS = st.sampled_from(["session_id", "tool", "category", "annotations", "call_id", "x"])


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=st.dictionaries(FIELDS, JSON, max_size=5))
def test_any_check_body_is_answered_200_429_or_a_named_400(api: Api, payload: Any) -> None:
    response = api.post("/v1/check", json.dumps(payload))
    assert response.status_code in (200, 400, 429)
    if response.status_code == 400:
        error = body(response)["error"]
        assert error["code"] == "invalid_request" and error["field"]
    else:
        assert body(response)["session_id"] == payload["session_id"]
