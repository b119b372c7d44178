"""One word for a refused call in every view: the CLI says `refused`, as the console does."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Cli
from tests.cli.fake_api import FakeAdminApi, session_view

TIMES = "\N{MULTIPLICATION SIGN}"

CONSOLE_JS = Path(__file__).resolve().parents[2] / "chalicelib" / "console" / "console.js"


def test_a_run_of_refusals_reads_refused_with_its_count(cli: Cli, api: FakeAdminApi) -> None:
    view = session_view()
    view["last_calls"][-1]["repeats"] = 26
    api.reply("GET", "/v1/sessions/sess-1", 200, view)

    run = cli.admin(api, "session", "show", "sess-1")

    assert run.code == 0, run.err
    row = next(line for line in run.out.splitlines() if "in a row" in line)
    assert row.split()[1:8] == [
        "delete_article",
        "write",
        "refused",
        "\N{MULTIPLICATION SIGN}26",
        "in",
        "a",
        "row",
    ]
    assert "BLOCKED" not in run.out


def test_a_single_refusal_reads_refused(cli: Cli, api: FakeAdminApi) -> None:
    api.reply("GET", "/v1/sessions/sess-1", 200, session_view())

    run = cli.admin(api, "session", "show", "sess-1")

    rows = [line.split() for line in run.out.splitlines() if "delete_article" in line]
    assert [row[3] for row in rows] == ["allowed", "refused"]


def test_the_console_uses_the_same_words() -> None:
    script = CONSOLE_JS.read_text()
    assert "`refused \N{MULTIPLICATION SIGN}${c.repeats} in a row`" in script
    assert "REFUSED" not in script


def test_a_replayed_call_reads_replay_not_a_second_run(cli: Cli, api: FakeAdminApi) -> None:
    view = session_view()
    first = view["last_calls"][0]
    retries = [{**first, "at": f"2026-12-02T11:59:0{i}Z", "replay": True} for i in (1, 2, 3)]
    view["last_calls"] = [first, *retries]
    api.reply("GET", "/v1/sessions/sess-1", 200, view)

    run = cli.admin(api, "session", "show", "sess-1")

    assert run.code == 0, run.err
    rows = [line.split() for line in run.out.splitlines() if "delete_article" in line]
    assert [row[3] for row in rows] == ["allowed", "replay", "replay", "replay"]


def test_the_console_marks_replays_too() -> None:
    assert 'c.replay ? "replay"' in CONSOLE_JS.read_text()


def test_refusals_the_mcp_server_held_are_counted_and_explained(
    cli: Cli, api: FakeAdminApi
) -> None:
    """Issue 31: one refused count, the held refusals broken out and explained."""
    view = session_view()
    view["categories"]["write"].update(refused=25, refused_held=22)
    view["last_calls"][-1].update(repeats=23, held=22)
    api.reply("GET", "/v1/sessions/sess-1", 200, view)

    run = cli.admin(api, "session", "show", "sess-1")

    assert run.code == 0, run.err
    assert "25 (22 held)" in run.out
    assert f"refused {TIMES}23 in a row (22 held)" in run.out
    assert "held: answered by the MCP server without asking" in run.out


def test_the_console_explains_held_refusals_in_the_same_count() -> None:
    script = CONSOLE_JS.read_text()
    assert "of them answered by the MCP server without asking" in script
    assert "c.refused_held" in script and "c.held" in script
