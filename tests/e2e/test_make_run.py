"""The service started as `make run` starts it, called over HTTP: the refusal with its
headers, bad input and auth, a fail-open report. (The limits themselves, and the idle
timeout behind Retry-After, are the API layer's: tests/api/test_check_api.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.http import call
from tests.support import running_service


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_service() as base:
        assert call(f"{base}/health", token=None).status == 200
        yield base


def check(url: str, session: str, tool: str) -> int:
    return call(f"{url}/v1/check", "POST", {"session_id": session, "tool": tool}).status


def test_15_writes_then_429_with_an_explicit_message(url: str) -> None:
    statuses = [check(url, "e2e-write", "delete_tag") for _ in range(15)]
    assert statuses == [200] * 15
    reply = call(f"{url}/v1/check", "POST", {"session_id": "e2e-write", "tool": "delete_tag"})
    assert reply.status == 429 and reply.headers["Retry-After"] == "3600"
    assert "NOT run" in reply.body["error"]["message"]


def test_bad_input_and_auth_over_http(url: str) -> None:
    bad = call(f"{url}/v1/check", "POST", {"session_id": "s", "tool": "x", "oops": 1})
    assert bad.status == 400 and bad.body["error"]["field"] == "oops"
    assert call(f"{url}/v1/check", "POST", {"session_id": "s"}, token=None).status == 401
    assert call(f"{url}/v1/check", "POST", {"session_id": "s"}, token="nope").status == 403


def test_the_service_accepts_a_fail_open_report(url: str) -> None:
    body = {"session_id": "e2e-fail-open", "tool": "delete_tag", "fail_open": {"read": 2}}
    reply = call(f"{url}/v1/check", "POST", body)
    assert reply.status == 200 and reply.body["allowed"] is True
