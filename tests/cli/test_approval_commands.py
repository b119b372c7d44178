"""`mcp-quota approvals ...` over HTTP (issue 32)."""

from __future__ import annotations

from typing import Any

from tests.cli.conftest import HOSTILE_TEXT, Cli, unsafe_characters
from tests.cli.fake_api import FakeAdminApi, error


def approval(approval_id: str = "ap_1", **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": approval_id,
        "state": "pending",
        "principal": "bot-1",
        "tool": "drop_table",
        "args_digest": "a" * 64,
        "arguments_preview": '{"table": "users"}',
        "session_id": "s-1",
        "server": "db",
        "created_at": "2026-12-04T10:00:00Z",
        "expires_at": "2026-12-04T10:15:00Z",
        "decided_by": None,
        "reason": None,
    }
    return {**base, **overrides}


def test_list_filters_by_state_and_shows_the_call(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/approvals", 200, {"approvals": [approval()]})
    run = cli.admin(api, "approvals", "list", "--state", "pending")
    assert run.code == 0, run.err
    assert "ap_1" in run.out and "drop_table" in run.out and "users" in run.out
    [request] = api.requests
    assert request.query == {"state": ["pending"]}


def test_approve_posts_the_reason(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("POST", "/v1/approvals/ap_1/approve", 200, approval(state="approved"))
    run = cli.admin(api, "approvals", "approve", "ap_1", "--reason", "ticket 42")
    assert run.code == 0, run.err
    [request] = api.requests
    assert request.body == {"reason": "ticket 42"}
    assert "Approved" in run.out


def test_deny_of_a_decided_approval_is_a_conflict(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("POST", "/v1/approvals/ap_1/deny", 409, error("conflict", "not pending"))
    run = cli.admin(api, "approvals", "deny", "ap_1")
    assert run.code == 5


def test_hostile_arguments_are_escaped(cli: Cli, api: FakeAdminApi) -> None:
    """The arguments are the agent's text: never obeyed by the terminal."""
    api.reply("GET", "/v1/approvals/ap_1", 200, approval(arguments_preview="".join(HOSTILE_TEXT)))
    run = cli.admin(api, "approvals", "show", "ap_1")
    assert run.code == 0, run.err
    assert unsafe_characters(run.out) == []
