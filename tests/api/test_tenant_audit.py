"""Issue 20 over the in-process API: the tenant-wide audit trail, a listing that agrees
with the session view, and email links that act relative to the state they were sent
for."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib.quota.core import SessionKey
from chalicelib.storage.ports import TroubleKind, TroubleMark
from tests.api.conftest import Api, body, running_api
from tests.api.test_console_links import FORM, SECRET, email_links, exhaust
from tests.support import FixedClock


@pytest.fixture(params=["memory", "dynamodb"])
def linked(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    with running_api(
        clock, request.param, link_secret=SECRET, public_url="http://links.test"
    ) as api:
        yield api


def feed(api: Api, query: str = "") -> list[dict[str, Any]]:
    answer = api.get(f"/v1/audit{query}")
    assert answer.status_code == 200, answer.body
    events: list[dict[str, Any]] = body(answer)["events"]
    return events


def path_of(link: str) -> str:
    return link.removeprefix("http://links.test")


# -- the tenant-wide trail ---------------------------------------------------------------


def test_the_tenant_trail_holds_every_kind_of_event_newest_first(
    linked: Api, clock: FixedClock
) -> None:
    who = {"principal": "tag-bot", "server": "inventory"}
    exhaust(linked, session="loop-a", **who)  # quota_exceeded, notification_sent
    clock.advance(1)
    raise_link = path_of(email_links(linked)[0])
    assert linked.client.http.post(raise_link, headers=FORM, body=b"").status_code == 200
    clock.advance(1)
    assert linked.admin("/v1/tokens", {"role": "server", "name": "ci"}).status_code == 201
    clock.advance(1)
    linked.admin("/v1/principals/tag-bot/suspend", {"reason": "looping"})
    clock.advance(1)
    linked.admin("/v1/sessions/other/suspend", {"reason": "looks wrong"})

    events = feed(linked)
    types = [e["type"] for e in events]
    assert types == [
        "session_suspended",
        "principal_suspended",
        "token_created",
        "session_raised",
        "notification_sent",
        "quota_exceeded",
    ]
    assert [e["at"] for e in events] == sorted((e["at"] for e in events), reverse=True)
    raised = events[3]
    assert raised["actor"] == "email-link"
    assert raised["detail"]["link_action"] == "raise" and raised["detail"]["link_id"]
    assert (raised["session_id"], raised["principal"], raised["server"]) == (
        "loop-a",
        "tag-bot",
        "inventory",
    )
    # Each filter, and filters together.
    assert [e["type"] for e in feed(linked, "?server=inventory")] == [
        "session_raised",
        "notification_sent",
        "quota_exceeded",
    ]
    assert {e["type"] for e in feed(linked, "?principal=tag-bot")} == {
        "principal_suspended",
        "session_raised",
        "notification_sent",
        "quota_exceeded",
    }
    assert [e["session_id"] for e in feed(linked, "?type=session_suspended")] == ["other"]
    both = feed(linked, "?type=quota_exceeded&principal=tag-bot&server=inventory")
    assert [e["session_id"] for e in both] == ["loop-a"]
    assert feed(linked, "?until=2026-12-02T11:59:59Z") == []
    assert feed(linked, "?since=2026-12-02T12:00:04Z&until=2026-12-02T12:00:04Z") == [events[0]]
    # Pages of one cover the whole trail once.
    seen, token = [], None
    while True:
        page = body(linked.get("/v1/audit?limit=1" + (f"&next={token}" if token else "")))
        seen += page["events"]
        token = page["next"]
        if token is None:
            break
    assert seen == events


def test_the_tenant_trail_refuses_what_it_cannot_answer(linked: Api) -> None:
    assert linked.get("/v1/audit?type=nonsense").status_code == 400
    assert linked.get("/v1/audit?session_id=s1&principal=bot").status_code == 400
    assert (
        linked.get("/v1/audit?since=2026-12-02T12:00:00Z&until=2026-12-01T00:00:00Z").status_code
        == 400
    )
    page = body(linked.get("/v1/audit?limit=1&principal=a"))
    assert page == {"events": [], "next": None}
    assert linked.get("/v1/audit?next=a1.forged").status_code == 400


# -- the listing agrees with the session view ------------------------------------------


def test_a_session_spent_without_a_refusal_is_listed_as_blocked(linked: Api) -> None:
    for _ in range(15):
        assert linked.check(session_id="exact", tool="delete_tag").status_code == 200
    shown = body(linked.get("/v1/sessions/exact"))["state"]
    listed = body(linked.get("/v1/sessions?state=blocked"))["sessions"]
    assert shown == "blocked"
    assert [(s["session_id"], s["listing_state"]) for s in listed] == [("exact", "blocked")]
    assert not linked.sent()  # no refusal: no email, only the index entry
    # Raised, it is active in both.
    linked.admin("/v1/sessions/exact/raise", {"category": "write", "add": 1, "reason": "ok"})
    assert body(linked.get("/v1/sessions?state=blocked"))["sessions"] == []
    active = body(linked.get("/v1/sessions?state=active"))["sessions"]
    assert [s["session_id"] for s in active] == ["exact"]


# -- links act relative to the state they were sent for --------------------------------


def test_the_confirmation_page_shows_the_limit_the_use_and_the_result(linked: Api) -> None:
    exhaust(linked)
    page = linked.client.http.get(path_of(email_links(linked)[0])).body.decode()
    assert "write 15 \u2192 30" in page
    assert "<dt>current limit</dt><dd>15 (write)</dd>" in page
    assert "<dt>used</dt><dd>15 of 15</dd>" in page


def test_a_raise_link_after_a_console_raise_past_its_target_is_already_done(
    linked: Api, clock: FixedClock
) -> None:
    exhaust(linked)
    link = path_of(email_links(linked)[0])
    clock.advance(5)
    linked.admin("/v1/sessions/run-1/raise", {"category": "write", "limit": 40, "reason": "more"})
    page = linked.client.http.get(link)
    assert page.status_code == 409 and b"Already done by dev-admin (admin)" in page.body
    done = linked.client.http.post(link, headers=FORM, body=b"")
    assert done.status_code == 409 and b"raised to 40" in done.body
    assert body(linked.get("/v1/sessions/run-1"))["categories"]["write"]["limit"] == 40
    [declined] = feed(linked, "?type=link_declined")
    assert declined["detail"]["link_action"] == "raise"
    assert declined["detail"]["subject"] == "session run-1"
    assert declined["detail"]["done_by"] == "dev-admin (admin)"


def test_a_partial_raise_since_makes_the_link_reach_its_own_target(
    linked: Api, clock: FixedClock
) -> None:
    exhaust(linked)
    link = path_of(email_links(linked)[0])
    linked.admin("/v1/sessions/run-1/raise", {"category": "write", "add": 5, "reason": "a bit"})
    assert "write 20 \u2192 30" in linked.client.http.get(link).body.decode()
    done = linked.client.http.post(link, headers=FORM, body=b"")
    assert done.status_code == 200 and b"from 20 to 30" in done.body
    assert body(linked.get("/v1/sessions/run-1"))["categories"]["write"]["limit"] == 30


def test_a_raise_link_after_a_reset_is_already_done(linked: Api, clock: FixedClock) -> None:
    exhaust(linked)
    link = path_of(email_links(linked)[0])
    clock.advance(5)
    linked.admin("/v1/sessions/run-1/reset", {"reason": "fresh start"})
    done = linked.client.http.post(link, headers=FORM, body=b"")
    assert done.status_code == 409
    assert b"Already done by dev-admin (admin)" in done.body and b"reset" in done.body
    assert body(linked.get("/v1/sessions/run-1"))["categories"]["write"]["limit"] == 15


def test_a_suspend_link_on_a_suspended_session_is_already_done(linked: Api) -> None:
    exhaust(linked)
    link = path_of(email_links(linked)[1])
    linked.admin("/v1/sessions/run-1/suspend", {"reason": "stop it"})
    page = linked.client.http.post(link, headers=FORM, body=b"")
    assert page.status_code == 409 and b"Already done by dev-admin (admin)" in page.body


SUPERSEDED = {
    # link (by its place in the email), the administrator's actions since it was sent,
    # and what the page then says was done
    "suspend session, resumed": (
        1,
        ["/v1/sessions/run-1/suspend", "/v1/sessions/run-1/resume"],
        b"resumed",
    ),
    "suspend session, reset": (1, ["/v1/sessions/run-1/reset"], b"reset"),
    "suspend principal, resumed": (
        2,
        ["/v1/principals/tag-bot/suspend", "/v1/principals/tag-bot/resume"],
        b"resumed",
    ),
    "suspend principal, reset": (2, ["/v1/principals/tag-bot/reset"], b"reset"),
    "raise, suspended": (0, ["/v1/sessions/run-1/suspend"], b"suspended"),
}


@pytest.mark.parametrize("case", list(SUPERSEDED))
def test_a_link_used_after_an_administrator_superseded_it_is_already_done(
    linked: Api, clock: FixedClock, case: str
) -> None:
    """Defect class: a link acted on the state it was sent for after an administrator's
    later action superseded it (a suspend link suspended again what an administrator had
    resumed). Such a link answers 409 "Already done", naming who, and changes nothing."""
    index, actions, said = SUPERSEDED[case]
    exhaust(linked, principal="tag-bot")
    link = path_of(email_links(linked)[index])
    for action in actions:
        clock.advance(5)
        assert linked.admin(action, {"reason": "handled"}).status_code == 200
    before = body(linked.get("/v1/sessions/run-1"))
    principal_before = body(linked.get("/v1/principals/tag-bot"))["state"]
    page = linked.client.http.get(link)
    assert page.status_code == 409 and b"Already done by dev-admin (admin)" in page.body
    done = linked.client.http.post(link, headers=FORM, body=b"")
    assert done.status_code == 409 and said in done.body
    after = body(linked.get("/v1/sessions/run-1"))
    assert (after["state"], after["categories"]) == (before["state"], before["categories"])
    assert body(linked.get("/v1/principals/tag-bot"))["state"] == principal_before
    [declined] = feed(linked, "?type=link_declined")
    assert declined["detail"]["done_by"] == "dev-admin (admin)"


def test_the_log_names_the_links_action_subject_and_actor(
    linked: Api, caplog: pytest.LogCaptureFixture
) -> None:
    exhaust(linked)
    link = path_of(email_links(linked)[1])
    with caplog.at_level(logging.INFO, logger="mcp-quota"):
        assert linked.client.http.post(link, headers=FORM, body=b"").status_code == 200
    [used] = [r for r in caplog.records if r.getMessage() == "email link used"]
    fields = used.__dict__
    assert fields["link_action"] == "suspend" and fields["subject"] == "session run-1"
    assert fields["actor"] == "email-link" and len(fields["link_id"]) == 16


# -- a listing whose page cost does not grow with the index -----------------------------

MARKS = 500
PAGE = 50
# Items a page may read from the store, whatever the index holds: the page's marks, a
# look ahead for the next token, and the sessions' own records (timing: `make bench`).
ITEMS_PER_PAGE = 4 * PAGE


class StoreReads:
    """The DynamoDB requests and the items they read, while counting."""

    def __init__(self, api: Api) -> None:
        self.requests = self.items = 0
        self._events = api.container.dynamodb.meta.events
        self._events.register("after-call.dynamodb", self._count)

    def _count(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        self.requests += 1
        if model.name in ("Query", "Scan"):
            self.items += int(parsed.get("ScannedCount", 0))
        elif model.name == "BatchGetItem":
            self.items += sum(len(v) for v in parsed.get("Responses", {}).values())
        elif model.name == "GetItem":
            self.items += "Item" in parsed

    def close(self) -> None:
        self._events.unregister("after-call.dynamodb", self._count)


@pytest.fixture
def dynamo_linked(clock: FixedClock) -> Iterator[Api]:
    with running_api(clock, "dynamodb") as api:
        yield api


def test_a_page_of_the_listing_reads_the_same_few_items_with_500_marks(
    dynamo_linked: Api, clock: FixedClock
) -> None:
    """A page of `GET /v1/sessions` reads a bounded number of items from the trouble
    index, not a scan of it: its cost is the same with 500 or 20,000 marks."""
    api = dynamo_linked
    now = clock()
    trouble = api.container.trouble
    # Sessions in trouble, as dense as 20,000 over the 30 days the index keeps them,
    # seeded through the store; the newest 3 * PAGE have counters (suspended).
    for i in range(MARKS):
        at = now - (i * 30 * 86_400_000) // 20_000  # as dense as 20,000 in the 30 days
        trouble.mark(TroubleMark("demo", f"s-{i:05d}", TroubleKind.EXHAUSTED, at, "write", "bot"))
    for i in range(3 * PAGE):
        api.container.counters.suspend(SessionKey("demo", f"s-{i:05d}"), "loop", now)

    def page(query: str) -> dict[str, Any]:
        reads = StoreReads(api)
        try:
            response = api.get(f"/v1/sessions{query}")
        finally:
            reads.close()
        assert response.status_code == 200
        print(f"{query}: {reads.requests} requests, {reads.items} items")
        assert reads.items <= ITEMS_PER_PAGE, (query, reads.items)
        shown: dict[str, Any] = body(response)
        return shown

    first = page(f"?state=suspended&limit={PAGE}")
    assert [s["session_id"] for s in first["sessions"]] == [f"s-{i:05d}" for i in range(PAGE)]
    second = page(f"?state=suspended&limit={PAGE}&next={first['next']}")
    assert second["sessions"][0]["session_id"] == f"s-{PAGE:05d}"
    page(f"?since=2026-11-01T00:00:00Z&limit={PAGE}")
