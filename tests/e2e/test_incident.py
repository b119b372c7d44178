"""The incident, replayed over HTTP against the service as `make run` starts it:
400 delete calls in a tight loop, one email, one audit event, then an admin raise."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.http import ADMIN_TOKEN, call
from tests.e2e.inbox import Stack, service_with_inbox


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with service_with_inbox() as started:
        yield started


def inbox(stack: Stack) -> list[dict[str, Any]]:
    return stack.inbox()


def test_the_incident_over_http(stack: Stack) -> None:
    body = {"session_id": "tag-cleanup", "tool": "delete_tag", "principal": "cleanup-agent"}
    replies = [call(f"{stack.url}/v1/check", "POST", body) for _ in range(400)]
    statuses = [r.status for r in replies]
    assert statuses[:15] == [200] * 15 and statuses[15:] == [429] * 385
    # The loop ignores 50 refusals: its principal is suspended and it is stopped outright.
    codes = [r.body["error"]["code"] for r in replies[15:]]
    assert codes[:50] == ["quota_exceeded"] * 50 and set(codes[50:]) == {"principal_suspended"}

    [suspended, email] = sorted(inbox(stack), key=lambda m: "suspended" not in m["Subject"])
    assert "tag-cleanup" in email["Subject"] and len(email["Subject"]) <= 100
    assert "mcp-quota session raise 'tag-cleanup'" in email["Message"]
    assert email["MessageAttributes"]["category"]["Value"] == "write"
    assert "cleanup-agent suspended" in suspended["Subject"]

    trail = call(f"{stack.url}/v1/audit?session_id=tag-cleanup", token=ADMIN_TOKEN).body
    blocks = [e for e in trail["events"] if e["type"] == "quota_exceeded"]
    assert len(blocks) == 1
    assert [c["tool"] for c in blocks[0]["detail"]["last_calls"]][-1] == "delete_tag"

    raised = call(
        f"{stack.url}/v1/sessions/tag-cleanup/raise",
        "POST",
        {"category": "write", "add": 10, "reason": "let the last batch finish"},
        token=ADMIN_TOKEN,
    )
    assert raised.status == 200 and raised.body["after"] == 25
    resumed = call(
        f"{stack.url}/v1/principals/cleanup-agent/resume",
        "POST",
        {"reason": "loop fixed"},
        token=ADMIN_TOKEN,
    )
    assert resumed.status == 200
    more = [call(f"{stack.url}/v1/check", "POST", body).status for _ in range(20)]
    assert more == [200] * 10 + [429] * 10
