"""Issue 12 over the in-process API: the email's signed one-click links, the listing of
blocked and suspended sessions, lowering and expiring raises, and the server's name."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib.console_files import console_file
from tests.api.conftest import ADMIN, Api, body, running_api
from tests.support import FixedClock

SECRET = "s" * 40
LINK = re.compile(r"(http://links\.test/actions/\S+)")
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture(params=["memory", "dynamodb"])
def linked(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    """The API with links set up, on both backends."""
    with running_api(
        clock, request.param, link_secret=SECRET, public_url="http://links.test"
    ) as api:
        yield api


def exhaust(api: Api, session: str = "run-1", **extra: Any) -> Any:
    for _ in range(15):
        assert api.check(session_id=session, tool="delete_tag", **extra).status_code == 200
    return api.check(session_id=session, tool="delete_tag", **extra)


def email_links(api: Api) -> list[str]:
    [message] = [m for m in api.sent() if "quota" in (m[2] or "")]
    return LINK.findall(message[1])


def test_the_email_carries_signed_links_and_clear_identities(linked: Api) -> None:
    exhaust(linked, principal="tag-bot", server="articles MCP")

    [message] = linked.sent()
    text = message[1]
    assert "server:     articles MCP" in text and "principal:  tag-bot" in text
    assert "first call: 2026-12-02T12:00:00Z" in text
    raise_link, suspend_link, principal_link = email_links(linked)
    assert "raise 'write' by 15 for this session" in text
    assert "suspend principal 'tag-bot'" in text
    assert "http://links.test/console#/session/run-1" in text
    assert len({raise_link, suspend_link, principal_link}) == 3


def test_a_link_confirms_on_get_acts_once_on_post_then_answers_410(linked: Api) -> None:
    exhaust(linked)
    raise_link = email_links(linked)[0]
    path = raise_link.removeprefix("http://links.test")

    page = linked.client.http.get(path)  # a mail scanner's prefetch
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert b'<form method="post">' in page.body
    assert linked.check(session_id="run-1", tool="delete_tag").status_code == 429

    done = linked.client.http.post(path, headers=FORM, body=b"")
    assert done.status_code == 200 and b"from 15 to 30" in done.body
    assert linked.check(session_id="run-1", tool="delete_tag").status_code == 200

    again = linked.client.http.post(path, headers=FORM, body=b"")
    assert again.status_code == 410 and b"already used at 2026-12-02T12:00:00Z" in again.body
    assert linked.client.http.get(path).status_code == 410
    events = body(linked.get("/v1/audit?session_id=run-1"))["events"]
    [raised] = [e for e in events if e["type"] == "session_raised"]
    assert raised["actor"] == "email-link" and raised["detail"]["link_id"]
    assert raised["after"]["limit"] == 30


def test_tampered_links_are_403_and_expired_ones_410(linked: Api, clock: FixedClock) -> None:
    exhaust(linked)
    suspend_link = email_links(linked)[1].removeprefix("http://links.test")
    version, payload, mac = suspend_link.removeprefix("/actions/").split(".")
    forged = f"/actions/{version}.{payload[:-2]}xx.{mac}"
    assert linked.client.http.get(forged).status_code == 403
    assert linked.client.http.post(forged, headers=FORM, body=b"").status_code == 403
    assert linked.client.http.get("/actions/not-a-token").status_code == 403

    clock.advance(24 * 3600 + 1)
    assert linked.client.http.post(suspend_link, headers=FORM, body=b"").status_code == 410
    assert body(linked.get("/v1/sessions/run-1"))["state"] != "suspended"


def test_a_version_less_link_is_retired_with_a_clear_page(linked: Api) -> None:
    """Defect class: a credential no key revocation reaches (v1 links verified against
    every key held)."""
    exhaust(linked)
    link = email_links(linked)[1].removeprefix("http://links.test")
    _, payload, mac = link.removeprefix("/actions/").split(".")
    retired = linked.client.http.get(f"/actions/v1.{payload}.{mac}")
    assert retired.status_code == 410
    assert b"earlier version of the service" in retired.body


def test_link_pages_escape_what_they_show(linked: Api) -> None:
    exhaust(linked, session="<script>alert(1)</script>")
    path = email_links(linked)[1].removeprefix("http://links.test")
    page = linked.client.http.get(path).body.decode()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_the_listing_shows_blocked_and_suspended_sessions_only(linked: Api) -> None:
    exhaust(linked, session="loop-a", principal="tag-bot")
    linked.check(session_id="quiet", tool="delete_tag")
    linked.admin("/v1/sessions/other/suspend", {"reason": "looping"})

    listed = body(linked.get("/v1/sessions"))
    assert [s["session_id"] for s in listed["sessions"]] == ["other", "loop-a"]
    blocked = body(linked.get("/v1/sessions?state=blocked"))["sessions"]
    assert [(s["session_id"], s["principal"]) for s in blocked] == [("loop-a", "tag-bot")]
    assert blocked[0]["categories"]["write"]["used"] == 15
    suspended = body(linked.get("/v1/sessions?state=suspended"))["sessions"]
    assert [s["session_id"] for s in suspended] == ["other"]

    linked.admin("/v1/sessions/loop-a/raise", {"category": "write", "add": 5, "reason": "ok"})
    assert body(linked.get("/v1/sessions?state=blocked"))["sessions"] == []
    active = body(linked.get("/v1/sessions?state=active"))["sessions"]
    assert [s["session_id"] for s in active] == ["loop-a"]
    assert body(linked.get("/v1/sessions?since=2030-01-01T00:00:00Z"))["sessions"] == []
    page = body(linked.get("/v1/sessions?limit=1"))
    assert [s["session_id"] for s in page["sessions"]] == ["other"] and page["next"]
    rest = body(linked.get(f"/v1/sessions?limit=1&next={page['next']}"))
    assert [s["session_id"] for s in rest["sessions"]] == ["loop-a"]
    # A page may end at a day's end; the day before (inside the 24 h) holds nothing.
    if rest["next"] is not None:
        last = body(linked.get(f"/v1/sessions?limit=1&next={rest['next']}"))
        assert last == {"sessions": [], "next": None}
    assert linked.get("/v1/sessions?state=idle").status_code == 400


def test_an_expiring_raise_lapses_and_lower_brings_it_down(linked: Api, clock: FixedClock) -> None:
    exhaust(linked)
    raised = linked.admin(
        "/v1/sessions/run-1/raise",
        {"category": "write", "add": 2, "expires_in_seconds": 60, "reason": "a bit more"},
    )
    assert body(raised)["session"]["categories"]["write"]["raised_until"]
    assert linked.check(session_id="run-1", tool="delete_tag").status_code == 200
    clock.advance(61)
    assert linked.check(session_id="run-1", tool="delete_tag").status_code == 429
    view = body(linked.get("/v1/sessions/run-1"))["categories"]["write"]
    assert (view["limit"], view["raised_limit"]) == (15, None)

    linked.admin("/v1/sessions/run-1/raise", {"category": "write", "limit": 18, "reason": "x"})
    conflict = linked.admin(
        "/v1/sessions/run-1/raise", {"category": "write", "limit": 16, "reason": "too much"}
    )
    assert conflict.status_code == 409 and "lower" in body(conflict)["error"]["message"]
    lowered = linked.admin("/v1/sessions/run-1/lower", {"category": "write", "reason": "enough"})
    assert (body(lowered)["before"], body(lowered)["after"]) == (18, 15)
    assert linked.check(session_id="run-1", tool="delete_tag").status_code == 429
    again = linked.admin("/v1/sessions/run-1/lower", {"category": "write", "reason": "again"})
    assert again.status_code == 409
    events = body(linked.get("/v1/audit?session_id=run-1"))["events"]
    assert [e["type"] for e in events].count("session_lowered") == 1


def test_the_session_view_names_server_and_call_times(linked: Api, clock: FixedClock) -> None:
    linked.check(session_id="s", tool="delete_tag", server="articles MCP", principal="p")
    clock.advance(5)
    linked.check(session_id="s", tool="get_article", principal="p")
    view = body(linked.get("/v1/sessions/s"))
    assert view["server"] == "articles MCP" and view["principal"] == "p"
    assert (view["first_call_at"], view["last_call_at"]) == (
        "2026-12-02T12:00:00Z",
        "2026-12-02T12:00:05Z",
    )
    bad = linked.check(session_id="s", tool="t", server="tab\there")
    assert bad.status_code == 400 and body(bad)["error"]["field"] == "server"


def test_no_links_without_a_secret(api: Api) -> None:
    exhaust(api)
    assert "/actions/" not in api.sent()[0][1]
    assert api.client.http.get("/actions/v1.a.b").status_code == 404


def test_the_console_is_served_with_its_content_types() -> None:
    for name, kind in [("index.html", "text/html"), ("console.js", "text/javascript")]:
        found = console_file(name)
        assert found is not None and found[1].startswith(kind)
    assert console_file("../app.py") is None


def test_console_routes(api: Api) -> None:
    page = api.client.http.get("/console")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    script = api.client.http.get("/console/console.js")
    assert script.headers["Content-Type"].startswith("text/javascript")
    assert api.client.http.get("/console/secrets.txt").status_code == 404
    assert api.get("/v1/sessions", headers=ADMIN).status_code == 200
