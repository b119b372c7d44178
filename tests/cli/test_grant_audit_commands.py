"""`mcp-quota grant ...` and `mcp-quota audit` over HTTP."""

from __future__ import annotations

import json

import pytest

from tests.cli.conftest import Cli
from tests.cli.fake_api import FakeAdminApi, error, grant

GRANT_ARGS = [
    "--principal",
    "migration-bot",
    "--category",
    "write",
    "--limit",
    "500",
    "--reason",
    "content migration",
]


def test_grant_add_posts_the_grant_with_times_normalised_to_utc(
    cli: Cli, api: FakeAdminApi
) -> None:
    api.reply("POST", "/v1/grants", 201, {"grant": grant("g-7")})

    run = cli.admin(
        api,
        "grant",
        "add",
        *GRANT_ARGS,
        "--starts-at",
        "2026-12-01T10:00:00+01:00",
        "--ends-at",
        "2026-12-01T17:00:00Z",
    )

    assert run.code == 0, run.err
    [request] = api.requests
    assert (request.method, request.path) == ("POST", "/v1/grants")
    assert request.body == {
        "principal": "migration-bot",
        "category": "write",
        "limit": 500,
        "starts_at": "2026-12-01T09:00:00Z",
        "ends_at": "2026-12-01T17:00:00Z",
        "reason": "content migration",
    }
    assert "Grant:       g-7" in run.out.splitlines()


@pytest.mark.parametrize(
    ("starts", "ends", "complaint"),
    [
        ("2026-12-01T09:00:00", "2026-12-01T17:00:00Z", "--starts-at"),
        ("2026-12-01T09:00:00Z", "tomorrow", "--ends-at"),
        ("2026-12-01T17:00:00Z", "2026-12-01T09:00:00Z", "later than"),
        ("2026-12-01T09:00:00Z", "2026-12-01T09:00:00Z", "later than"),
    ],
)
def test_grant_add_refuses_bad_windows_before_any_request(
    cli: Cli, api: FakeAdminApi, starts: str, ends: str, complaint: str
) -> None:
    run = cli.admin(api, "grant", "add", *GRANT_ARGS, "--starts-at", starts, "--ends-at", ends)

    assert run.code == 2
    assert complaint in run.err
    assert api.requests == []


def test_grant_list_renders_a_table(cli: Cli, api: FakeAdminApi) -> None:
    grants = [grant("g-1"), grant("g-2", principal="bob", limit=40, reason=None)]
    api.reply("GET", "/v1/grants", 200, {"grants": grants})

    run = cli.admin(api, "grant", "list")

    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].split()[:3] == ["GRANT", "ID", "PRINCIPAL"]
    assert lines[1].split()[:4] == ["g-1", "migration-bot", "write", "500"]
    assert lines[2].split()[:4] == ["g-2", "bob", "write", "40"]
    assert lines[2].rstrip().endswith("-")


def test_grant_list_json_and_empty(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/grants", 200, {"grants": []})

    assert cli.admin(api, "grant", "list").out.strip() == "No grants."
    assert json.loads(cli.admin(api, "grant", "list", "--json").out) == {"grants": []}


def test_grant_rm_deletes_by_encoded_id(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("DELETE", "/v1/grants/g%2F1", 200, {"grant": grant("g/1")})

    run = cli.admin(api, "grant", "rm", "g/1")

    assert run.code == 0, run.err
    assert [(r.method, r.path) for r in api.requests] == [("DELETE", "/v1/grants/g%2F1")]
    assert run.out.startswith("Grant removed.")


def test_grant_rm_unknown_exits_3(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("DELETE", "/v1/grants/nope", 404, error("not_found", "No grant 'nope'."))

    run = cli.admin(api, "grant", "rm", "nope")

    assert run.code == 3
    assert "No grant 'nope'." in run.err


def _event(n: int, **extra: object) -> dict[str, object]:
    return {
        "at": f"2026-12-02T12:00:{n:02d}Z",
        "type": "quota_exceeded",
        "tenant": "demo",
        "session_id": "sess-1",
        "actor": "system",
        **extra,
    }


def test_audit_sends_filters_as_query_and_renders_events(cli: Cli, api: FakeAdminApi) -> None:
    raise_event = _event(2, type="raise", actor="dev-admin", reason="ok", before=15, after=25)
    api.reply("GET", "/v1/audit", 200, {"events": [_event(1), raise_event], "next": None})

    run = cli.admin(
        api, "audit", "--session", "a/b", "--since", "2026-12-02T13:00:00+01:00", "--limit", "2"
    )

    assert run.code == 0, run.err
    [request] = api.requests
    assert request.query == {
        "session_id": ["a/b"],
        "since": ["2026-12-02T12:00:00Z"],
        "limit": ["2"],
    }
    lines = run.out.splitlines()
    assert lines[0].split() == [
        "AT",
        "TYPE",
        "SESSION",
        "PRINCIPAL",
        "SERVER",
        "ACTOR",
        "REASON",
        "CHANGE",
        "DETAIL",
    ]
    assert lines[2].split() == [
        "2026-12-02T12:00:02Z",
        "raise",
        "sess-1",
        "-",
        "-",
        "dev-admin",
        "ok",
        "15",
        "->",
        "25",
        "-",
    ]
    assert run.err == ""


def test_audit_one_page_hints_at_the_next(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/audit", 200, {"events": [_event(1)], "next": "tok-2"})

    run = cli.admin(api, "audit")

    assert run.code == 0
    assert "--next tok-2" in run.err
    assert "next" not in api.requests[0].query


def test_audit_next_is_passed_through(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/audit", 200, {"events": [], "next": None})

    run = cli.admin(api, "audit", "--next", "tok-2")

    assert run.code == 0
    assert run.out.strip() == "No audit events."
    assert api.requests[0].query == {"next": ["tok-2"]}


def test_audit_all_pages_follows_next_until_null(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/audit", 200, {"events": [_event(1), _event(2)], "next": "p2"})
    api.reply("GET", "/v1/audit", 200, {"events": [_event(3)], "next": "p3"})
    api.reply("GET", "/v1/audit", 200, {"events": [_event(4)], "next": None})

    run = cli.admin(api, "audit", "--session", "sess-1", "--all-pages", "--json")

    assert run.code == 0, run.err
    assert [r.query.get("next") for r in api.requests] == [None, ["p2"], ["p3"]]
    assert all(r.query["session_id"] == ["sess-1"] for r in api.requests)
    data = json.loads(run.out)
    assert [e["at"][-3:-1] for e in data["events"]] == ["01", "02", "03", "04"]
    assert data["next"] is None


def test_audit_all_pages_stops_when_the_service_repeats_a_token(
    cli: Cli, api: FakeAdminApi
) -> None:
    api.reply("GET", "/v1/audit", 200, {"events": [_event(1)], "next": "same"})

    run = cli.admin(api, "audit", "--all-pages")

    assert run.code == 1
    assert "repeated" in run.err
    assert len(api.requests) == 2


def test_audit_object_changes_show_what_changed(cli: Cli, api: FakeAdminApi) -> None:
    before = {"category": "write", "limit": 15}
    after = {"category": "write", "limit": 25}
    event = _event(1, type="session_raised", before=before, after=after)
    api.reply("GET", "/v1/audit", 200, {"events": [event], "next": None})

    lines = cli.admin(api, "audit", "--session", "sess-1").out.splitlines()

    assert "category=write, limit: 15 -> 25" in lines[1]


def test_audit_detail_is_compact_json_on_one_line(cli: Cli, api: FakeAdminApi) -> None:
    detail = {"last_calls": [{"tool": "delete_article", "allowed": False}]}
    api.reply("GET", "/v1/audit", 200, {"events": [_event(1, detail=detail)], "next": None})

    lines = cli.admin(api, "audit").out.splitlines()

    assert len(lines) == 2
    assert lines[1].endswith('{"last_calls":[{"allowed":false,"tool":"delete_article"}]}')


def test_audit_of_the_tenant_sends_its_filters(cli: Cli, api: FakeAdminApi) -> None:
    event = _event(1, type="session_raised", principal="bot", server="inventory")
    api.reply("GET", "/v1/audit", 200, {"events": [event], "next": None})

    run = cli.admin(
        api,
        "audit",
        "--type",
        "session_raised",
        "--principal",
        "bot",
        "--server",
        "inventory",
        "--until",
        "2026-12-02T13:00:00+01:00",
    )

    assert run.code == 0, run.err
    [request] = api.requests
    assert request.query == {
        "type": ["session_raised"],
        "principal": ["bot"],
        "server": ["inventory"],
        "until": ["2026-12-02T12:00:00Z"],
    }
    assert "inventory" in run.out
