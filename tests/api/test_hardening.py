"""Issue 10 through the in-process API: suspended refusals advertise no headroom, the
last calls are the configured number everywhere, and client fail-open counts become a
metric."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import Api, body

WRITE = {"session_id": "s1", "tool": "delete_tag"}


def test_a_suspended_refusal_advertises_no_headroom(api: Api) -> None:
    api.check(**WRITE)
    api.admin("/v1/sessions/s1/suspend", {"reason": "runaway"})
    for tool in ("delete_tag", "search_articles"):
        response = api.check(session_id="s1", tool=tool)
        assert response.status_code == 429
        assert ";r=0;" in response.headers["RateLimit"]
        assert body(response)["remaining"] == 0
        assert "Retry-After" not in response.headers


def test_last_calls_are_the_configured_number_in_the_answer_show_and_email(api: Api) -> None:
    keep = api.container.settings.last_calls
    for _ in range(40):  # 15 allowed, 25 refused: past several trim batches
        last = api.check(**WRITE)
    assert last.status_code == 429
    shown = body(api.get("/v1/sessions/s1"))["last_calls"]
    assert len(shown) == keep
    [note] = api.sent()
    table = note[1].split("Last calls of the session:")[1].split("What you can do")[0]
    rows = [line for line in table.splitlines() if "delete_tag" in line]
    assert len(rows) == keep
    events = body(api.get("/v1/audit?session_id=s1"))["events"]
    [exceeded] = [e for e in events if e["type"] == "quota_exceeded"]
    assert len(exceeded["detail"]["last_calls"]) == keep


def test_client_fail_open_counts_become_a_metric(
    api: Api, capsys: pytest.CaptureFixture[str]
) -> None:
    response = api.check(**WRITE, fail_open={"read": 7, "write": 0})
    assert response.status_code == 200
    metrics = [json.loads(line) for line in capsys.readouterr().out.splitlines() if "_aws" in line]
    fail_open = [m for m in metrics if "ClientFailOpen" in m]
    assert [(m["category"], m["ClientFailOpen"]) for m in fail_open] == [("read", [7.0])]


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"nope": 1}, "fail_open.nope"),
        ({"read": -1}, "fail_open.read"),
        ({"read": "3"}, "fail_open.read"),
        ([1], "fail_open"),
    ],
)
def test_bad_fail_open_reports_are_a_named_400(api: Api, value: Any, field: str) -> None:
    response = api.check(**WRITE, fail_open=value)
    assert response.status_code == 400
    assert body(response)["error"]["field"] == field


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PATCH", "/v1/check", "POST"),
        ("FOO", "/v1/check", "POST"),
        ("PUT", "/v1/sessions/s1", "GET"),
        ("PROPFIND", "/v1/tokens", "POST, GET"),
        ("TRACE", "/health", "GET"),
        ("DELETE", "/console", "GET, HEAD"),
    ],
)
def test_a_method_a_route_lacks_is_a_json_405_naming_what_it_allows(
    api: Api, method: str, path: str, allow: str
) -> None:
    """Defect class: a method a route does not have was answered in Chalice's own error
    shape (`{"Code", "Message"}`), not the service's one shape."""
    answer = api.client.http.request(method, path, headers={"Authorization": "Bearer x"})
    assert answer.status_code == 405
    assert answer.headers["Allow"] == allow
    error = body(answer)["error"]
    assert set(body(answer)) == {"error"} and error["code"] == "method_not_allowed"
    assert allow in error["message"]
