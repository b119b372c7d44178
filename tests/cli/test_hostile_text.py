"""Stored text reaches the operator's terminal escaped: control characters, bidi controls
and lone surrogates in reasons, names and tools are shown as backslash escapes, never
obeyed, and never crash the output."""

from __future__ import annotations

import json

import pytest

from admin_cli.render import escape
from tests.cli.conftest import HOSTILE_TEXT, Cli, unsafe_characters
from tests.cli.fake_api import FakeAdminApi, error, grant, session_view


def _hostile_session(text: str) -> dict[str, object]:
    view = session_view("sess-1", state="suspended", suspended_reason=text, principal=text)
    view["categories"] = {**view["categories"], text: {"used": 1, "limit": 2}}
    view["last_calls"] = [
        {"at": "2026-12-02T11:59:00Z", "tool": text, "category": text, "allowed": False,
         "call_id": text, "principal": text},
    ]  # fmt: skip
    return view


def _assert_shown_escaped(run_out: str, run_err: str, text: str) -> None:
    assert unsafe_characters(run_out) == []
    assert unsafe_characters(run_err) == []
    assert escape(text) in run_out


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_session_show_escapes_stored_text(cli: Cli, api: FakeAdminApi, text: str) -> None:
    api.reply("GET", "/v1/sessions/sess-1", 200, _hostile_session(text))

    run = cli.admin(api, "session", "show", "sess-1")

    assert run.code == 0, run.err
    _assert_shown_escaped(run.out, run.err, text)
    assert f"Suspended:  {escape(text)}" in run.out.splitlines()


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_audit_escapes_stored_text(cli: Cli, api: FakeAdminApi, text: str) -> None:
    event = {
        "at": "2026-12-02T12:00:00Z",
        "type": text,
        "session_id": "sess-1",
        "actor": text,
        "reason": text,
        "before": {text: 1},
        "after": {text: 2},
        "detail": {"note": text},
    }
    api.reply("GET", "/v1/audit", 200, {"events": [event], "next": text})

    run = cli.admin(api, "audit", "--session", "sess-1")

    assert run.code == 0, run.err
    _assert_shown_escaped(run.out, run.err, text)
    assert len(run.out.strip().splitlines()) == 2  # the header and one row: no injected rows


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_grant_list_escapes_stored_text(cli: Cli, api: FakeAdminApi, text: str) -> None:
    hostile = grant("g-1", principal=text, reason=text, created_by=text, category=text)
    api.reply("GET", "/v1/grants", 200, {"grants": [hostile]})

    run = cli.admin(api, "grant", "list")

    assert run.code == 0, run.err
    _assert_shown_escaped(run.out, run.err, text)


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_raise_headline_escapes_the_category(cli: Cli, api: FakeAdminApi, text: str) -> None:
    answer = {"category": text, "before": 15, "after": 25, "session": _hostile_session(text)}
    api.reply("POST", "/v1/sessions/sess-1/raise", 200, answer)

    run = cli.admin(
        api, "session", "raise", "sess-1", "--category", "write", "--add", "10", "--reason", "ok"
    )

    assert run.code == 0, run.err
    _assert_shown_escaped(run.out, run.err, text)


@pytest.mark.parametrize("text", HOSTILE_TEXT)
def test_error_messages_from_the_service_are_escaped(
    cli: Cli, api: FakeAdminApi, text: str
) -> None:
    api.reply("GET", "/v1/grants", 400, error("invalid_request", f"Bad {text}", text))

    run = cli.admin(api, "grant", "list")

    assert run.code == 2
    assert run.out == ""
    assert unsafe_characters(run.err) == []
    assert escape(text) in run.err


def test_json_output_is_escaped_by_json_itself(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/sessions/sess-1", 200, _hostile_session("".join(HOSTILE_TEXT)))

    run = cli.admin(api, "session", "show", "sess-1", "--json")

    assert run.code == 0, run.err
    assert unsafe_characters(run.out) == []
    assert json.loads(run.out)["suspended_reason"] == "".join(HOSTILE_TEXT)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("\x1b[2J", "\\x1b[2J"),
        ("a\rb\tc\nd", "a\\rb\\tc\\nd"),
        ("\x9b", "\\x9b"),
        ("\ud800", "\\ud800"),
        ("\u202e", "\\u202e"),
        ("\U000e0001", "\\U000e0001"),
        ("café ☕ 日本", "café ☕ 日本"),
    ],
)
def test_escape_shows_each_unsafe_character_as_a_backslash_escape(text: str, shown: str) -> None:
    assert escape(text) == shown
    assert escape(shown) == shown
