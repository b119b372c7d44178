"""`mcp-quota session ...` over HTTP: what is sent, what is printed, which exit code."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.conftest import ADMIN_TOKEN, Cli
from tests.cli.fake_api import FakeAdminApi, error, session_view


def test_show_sends_an_authenticated_get_and_renders_the_session(
    cli: Cli, api: FakeAdminApi
) -> None:
    api.reply("GET", "/v1/sessions/sess-1", 200, session_view())

    run = cli.admin(api, "session", "show", "sess-1")

    assert run.code == 0, run.err
    [request] = api.requests
    assert (request.method, request.path, request.body) == ("GET", "/v1/sessions/sess-1", None)
    assert request.headers["authorization"] == f"Bearer {ADMIN_TOKEN}"
    assert request.headers["accept"] == "application/json"
    lines = run.out.splitlines()
    assert "State:      active" in lines
    assert "Principal:  alice@example.com" in lines
    header = next(line for line in lines if line.startswith("CATEGORY"))
    assert header.split() == [
        "CATEGORY",
        "USED",
        "LEASED",
        "LIMIT",
        "BASE",
        "RAISED",
        "REMAINING",
        "REFUSED",
    ]
    assert next(line for line in lines if line.startswith("read")).split()[:3] == [
        "read",
        "12",
        "10",
    ]
    assert next(line for line in lines if line.startswith("write")).split() == [
        "write",
        "15",
        "-",
        "15",
        "15",
        "-",
        "0",
        "1",
    ]
    refused = next(line for line in lines if "refused" in line)
    assert refused.split()[:4] == ["2026-12-02T11:59:00Z", "delete_article", "write", "refused"]
    assert run.err == ""


def test_table_columns_are_aligned(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/sessions/sess-1", 200, session_view())

    out = cli.admin(api, "session", "show", "sess-1").out

    table = [line for line in out.splitlines() if line.startswith(("CATEGORY", "read", "write"))]
    column_starts = {tuple(m.start() for m in re.finditer(r"\S+", line)) for line in table}
    assert len(table) == 3
    assert len(column_starts) == 1, table


def test_show_json_prints_the_servers_json(cli: Cli, api: FakeAdminApi) -> None:
    body = session_view(state="suspended", suspended_reason="runaway loop")
    api.reply("GET", "/v1/sessions/sess-1", 200, body)

    run = cli.admin(api, "session", "show", "sess-1", "--json")

    assert run.code == 0
    assert json.loads(run.out) == body


def test_suspended_session_shows_the_reason(cli: Cli, api: FakeAdminApi) -> None:
    body = session_view(state="suspended", suspended_reason="runaway loop")
    api.reply("GET", "/v1/sessions/sess-1", 200, body)

    out = cli.admin(api, "session", "show", "sess-1").out

    assert "Suspended:  runaway loop" in out.splitlines()


def test_session_id_is_percent_encoded_as_one_path_segment(cli: Cli, api: FakeAdminApi) -> None:
    session_id = "agent/42?x=1#frag%"
    encoded = "/v1/sessions/agent%2F42%3Fx%3D1%23frag%25"
    api.reply("GET", encoded, 200, session_view(session_id))

    run = cli.admin(api, "session", "show", session_id)

    assert run.code == 0, run.err
    assert [r.path for r in api.requests] == [encoded]


@pytest.mark.parametrize("session_id", ["", "has space", "x" * 257, "caf\u00e9"])
def test_invalid_session_id_is_refused_before_any_request(
    cli: Cli, api: FakeAdminApi, session_id: str
) -> None:
    run = cli.admin(api, "session", "show", session_id)

    assert run.code == 2
    assert "Session id" in run.err
    assert api.requests == []


def test_url_and_token_come_from_the_environment(
    cli: Cli, api: FakeAdminApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_QUOTA_URL", api.url + "/")
    monkeypatch.setenv("MCP_QUOTA_ADMIN_TOKEN", "env-token")
    api.reply("GET", "/v1/sessions/sess-1", 200, session_view())

    run = cli("session", "show", "sess-1")

    assert run.code == 0, run.err
    assert api.requests[0].headers["authorization"] == "Bearer env-token"
    assert api.requests[0].path == "/v1/sessions/sess-1"


def test_flags_override_the_environment_and_work_before_the_command(
    cli: Cli, api: FakeAdminApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_QUOTA_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("MCP_QUOTA_ADMIN_TOKEN", "env-token")
    api.reply("GET", "/v1/sessions/sess-1", 200, session_view())

    run = cli("--url", api.url, "--token", "flag-token", "--json", "session", "show", "sess-1")

    assert run.code == 0, run.err
    assert api.requests[0].headers["authorization"] == "Bearer flag-token"
    assert json.loads(run.out)["session_id"] == "sess-1"


def test_no_token_exits_4_without_calling_the_service(cli: Cli, api: FakeAdminApi) -> None:
    run = cli("session", "show", "sess-1", "--url", api.url)

    assert run.code == 4
    assert "MCP_QUOTA_ADMIN_TOKEN" in run.err
    assert api.requests == []


def test_the_server_token_variable_is_not_taken_for_the_admin_token(
    cli: Cli, api: FakeAdminApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect class: one variable (MCP_QUOTA_TOKEN) meaning the server token for the
    proxy and the admin token for the CLI; the refusal names the CLI's own variable."""
    monkeypatch.setenv("MCP_QUOTA_TOKEN", "dev-server-token")

    run = cli("session", "show", "sess-1", "--url", api.url)

    assert run.code == 4
    assert "MCP_QUOTA_ADMIN_TOKEN" in run.err
    assert "MCP_QUOTA_TOKEN is the MCP server's token" in run.err
    assert api.requests == []


def _raised(before: int, after: int) -> dict[str, object]:
    categories = session_view()["categories"]
    categories["write"] = {
        "used": 15,
        "limit": after,
        "base_limit": 15,
        "raised_limit": after,
        "remaining": after - 15,
    }
    return {
        "session": session_view(categories=categories),
        "category": "write",
        "before": before,
        "after": after,
    }


def test_raise_by_add_posts_category_add_and_reason(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("POST", "/v1/sessions/sess-1/raise", 200, _raised(15, 25))

    run = cli.admin(
        api, "session", "raise", "sess-1", "--category", "write", "--add", "10", "--reason", " ok "
    )

    assert run.code == 0, run.err
    [request] = api.requests
    assert request.method == "POST"
    assert request.body == {"category": "write", "add": 10, "reason": "ok"}
    assert request.headers["content-type"] == "application/json"
    assert run.out.splitlines()[0] == "Raised write for session sess-1: limit 15 -> 25."
    row = next(line for line in run.out.splitlines() if line.startswith("write"))
    assert row.split() == ["write", "15", "-", "25", "15", "25", "10", "-"]


def test_raise_to_limit_posts_limit_not_add(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("POST", "/v1/sessions/sess-1/raise", 200, _raised(15, 40))

    run = cli.admin(
        api, "session", "raise", "sess-1", "--category", "write", "--limit", "40", "--reason", "r"
    )

    assert run.code == 0, run.err
    assert api.requests[0].body == {"category": "write", "limit": 40, "reason": "r"}


@pytest.mark.parametrize(
    "amount",
    [[], ["--limit", "40", "--add", "1"], ["--add", "0"], ["--add", "-3"], ["--limit", "x"]],
)
def test_raise_needs_exactly_one_positive_amount(
    cli: Cli, api: FakeAdminApi, amount: list[str]
) -> None:
    run = cli.admin(
        api, "session", "raise", "sess-1", "--category", "write", *amount, "--reason", "r"
    )

    assert run.code == 2
    assert api.requests == []


def test_raise_that_would_lower_exits_5_with_the_servers_message(
    cli: Cli, api: FakeAdminApi
) -> None:
    message = "A raise cannot lower the write limit of session sess-1 (15 -> 10)."
    api.reply("POST", "/v1/sessions/sess-1/raise", 409, error("conflict", message))

    run = cli.admin(
        api, "session", "raise", "sess-1", "--category", "write", "--limit", "10", "--reason", "r"
    )

    assert run.code == 5
    assert run.out == ""
    [line] = run.err.strip().splitlines()
    assert line.startswith(f"mcp-quota: error: {message} ")
    assert line.endswith('mcp-quota session lower sess-1 --category write --reason "..."')


def test_raise_above_the_policy_maximum_exits_2_naming_the_field(
    cli: Cli, api: FakeAdminApi
) -> None:
    body = error("invalid_request", "The write limit can be raised to at most 1000.", "limit")
    api.reply("POST", "/v1/sessions/sess-1/raise", 400, body)

    run = cli.admin(
        api, "session", "raise", "sess-1", "--category", "write", "--limit", "5000", "--reason", "r"
    )

    assert run.code == 2
    assert "at most 1000. (field: limit)" in run.err


@pytest.mark.parametrize(
    ("action", "headline"),
    [
        ("suspend", "Session sess-1 suspended."),
        ("resume", "Session sess-1 resumed."),
        ("reset", "Session sess-1 reset (counters zeroed)."),
    ],
)
def test_state_actions_post_the_reason_to_their_path(
    cli: Cli, api: FakeAdminApi, action: str, headline: str
) -> None:
    api.reply("POST", f"/v1/sessions/sess-1/{action}", 200, {"session": session_view()})

    run = cli.admin(api, "session", action, "sess-1", "--reason", "incident 42")

    assert run.code == 0, run.err
    [request] = api.requests
    assert (request.method, request.path) == ("POST", f"/v1/sessions/sess-1/{action}")
    assert request.body == {"reason": "incident 42"}
    assert run.out.splitlines()[0] == headline


def test_blank_reason_is_refused_before_any_request(cli: Cli, api: FakeAdminApi) -> None:
    run = cli.admin(api, "session", "suspend", "sess-1", "--reason", "   ")

    assert run.code == 2
    assert "--reason" in run.err
    assert api.requests == []


@pytest.mark.parametrize(
    ("reason", "complaint"),
    [
        ("x" * 1001, "at most 1000 characters"),
        ("fixed\x1b[2J", "control characters"),
        ("fixed\u202e", "control characters"),
    ],
)
def test_a_reason_the_service_would_refuse_is_refused_before_any_request(
    cli: Cli, api: FakeAdminApi, reason: str, complaint: str
) -> None:
    run = cli.admin(api, "session", "suspend", "sess-1", "--reason", reason)

    assert run.code == 2
    assert "--reason" in run.err and complaint in run.err
    assert api.requests == []


def test_missing_reason_is_a_usage_error(cli: Cli, api: FakeAdminApi) -> None:
    run = cli.admin(api, "session", "reset", "sess-1")

    assert run.code == 2
    assert "--reason" in run.err
    assert api.requests == []


def test_unknown_session_exits_3(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/sessions/nope", 404, error("not_found", "No session 'nope'."))

    run = cli.admin(api, "session", "show", "nope")

    assert run.code == 3
    assert run.err.strip() == "mcp-quota: error: No session 'nope'."


def test_an_answer_without_the_session_object_exits_1(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("POST", "/v1/sessions/sess-1/reset", 200, {"ok": True})

    run = cli.admin(api, "session", "reset", "sess-1", "--reason", "r")

    assert run.code == 1
    assert "'session'" in run.err


def test_show_prints_a_runaway_loop_as_one_row_with_its_count(cli: Cli, api: FakeAdminApi) -> None:
    view = session_view()
    view["last_calls"][-1]["repeats"] = 385
    api.reply("GET", "/v1/sessions/sess-1", 200, view)

    run = cli.admin(api, "session", "show", "sess-1")

    refused = next(line for line in run.out.splitlines() if "in a row" in line)
    assert refused.split()[3:7] == ["refused", "\N{MULTIPLICATION SIGN}385", "in", "a"]


def test_show_names_the_server_and_the_mcp_client(cli: Cli, api: FakeAdminApi) -> None:
    client = {"name": "claude-code", "version": "1.0.71", "oauth_client_id": "agent-app"}
    api.reply("GET", "/v1/sessions/sess-1", 200, session_view(server="inventory", client=client))

    run = cli.admin(api, "session", "show", "sess-1")

    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert "Server:     inventory" in lines
    assert "Client:     claude-code 1.0.71, OAuth client agent-app" in lines


def test_list_names_each_sessions_server_and_mcp_client(cli: Cli, api: FakeAdminApi) -> None:
    client = {"name": "claude-code", "version": "1.0.71", "oauth_client_id": "agent-app"}
    listed = [
        {**session_view("sess-1", server="inventory", client=client), "listing_state": "blocked"},
        {**session_view("sess-2", server=None, client=None), "listing_state": "suspended"},
    ]
    api.reply("GET", "/v1/sessions", 200, {"sessions": listed, "next": None})

    run = cli.admin(api, "session", "list")

    assert run.code == 0, run.err
    header, first, second = run.out.splitlines()
    column = header.index("CLIENT")
    assert header.index("SERVER") < column < header.index("LAST CALL")
    # Name and version only: the OAuth client id is on the session's own page.
    assert first[column:].split("  ")[0] == "claude-code 1.0.71"
    assert "agent-app" not in first
    assert second.split() == [
        "sess-2",
        "suspended",
        "alice@example.com",
        "-",
        "-",
        "2026-12-02T11:59:00Z",
    ]
