"""Fail-open calls are reported to the service with the next check it answers.

Against the loopback stub in conftest: the real service accepts the `fail_open` field
only once the lead's change to chalicelib/check/requests.py and app.py lands (until then it
answers 400 "Unknown field 'fail_open'", which the stub does by default). The real-service
test is `tests/e2e/test_make_run.py::test_the_service_accepts_a_fail_open_report`.
"""

from __future__ import annotations

import pytest
from mcp_quota_client import CheckRequest, Outcome

from tests.mcp.conftest import ClientFactory, FakeQuotaService, Scripted

pytestmark = pytest.mark.anyio

READ = CheckRequest(session_id="s1", tool="search_articles", annotations={"readOnlyHint": True})
WRITE = CheckRequest(session_id="s1", tool="delete_tag", annotations={"destructiveHint": True})


async def test_fail_open_calls_go_with_the_next_answered_check_then_stop(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.accepts_fail_open = True
    quota_service.script.extend([Scripted(503), Scripted(503)])
    client = make_client(max_attempts=1)

    outages = [await client.check(READ), await client.check(READ)]
    reported = await client.check(WRITE)
    after = await client.check(WRITE)

    assert [d.outcome for d in outages] == [Outcome.FAIL_OPEN, Outcome.FAIL_OPEN]
    assert (reported.outcome, after.outcome) == (Outcome.ALLOWED, Outcome.ALLOWED)
    bodies = quota_service.bodies()
    assert "fail_open" not in bodies[0]
    assert bodies[1]["fail_open"] == {"read": 1}  # carried, but that check went unanswered
    assert bodies[2]["fail_open"] == {"read": 2}
    assert "fail_open" not in bodies[3]
    assert client.stats().fail_open == {"read": 2}
    assert client.stats().fail_open_unreported == {}


async def test_a_check_the_service_did_not_answer_keeps_the_report(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.accepts_fail_open = True
    quota_service.script.extend([Scripted(503), Scripted(503)])
    client = make_client(max_attempts=1)

    await client.check(READ)  # fail open: 1 unreported
    carried = await client.check(READ)  # carries {"read": 1}, 503 again: fail open
    reported = await client.check(READ)

    assert carried.outcome is Outcome.FAIL_OPEN
    assert reported.outcome is Outcome.ALLOWED
    bodies = quota_service.bodies()
    assert bodies[1]["fail_open"] == {"read": 1}
    assert bodies[2]["fail_open"] == {"read": 2}
    assert client.stats().fail_open_unreported == {}


async def test_a_service_without_the_field_gets_the_check_again_without_it(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.accepts_fail_open = False  # an older service, before the field
    quota_service.script.append(Scripted(503))
    client = make_client(max_attempts=1)

    await client.check(READ)
    decision = await client.check(WRITE)
    later = await client.check(WRITE)

    assert decision.allowed is True and later.allowed is True
    bodies = quota_service.bodies()
    assert bodies[1]["fail_open"] == {"read": 1}
    assert "fail_open" not in bodies[2]
    assert bodies[2]["call_id"] == bodies[1]["call_id"]  # the same check, asked again
    assert "fail_open" not in bodies[3]
    assert client.stats().fail_open_unreported == {"read": 1}
    assert client.stats().rejected == 0


async def test_nothing_is_sent_when_there_is_nothing_to_report(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    client = make_client()

    decision = await client.check(WRITE)

    assert decision.allowed is True
    assert "fail_open" not in quota_service.bodies()[0]
