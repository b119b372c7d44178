"""The local refusal hold as pure bookkeeping, on a clock the test moves."""

from __future__ import annotations

from mcp_quota_client import CheckRequest, Decision, Outcome
from mcp_quota_client.hold import HeldReport, RefusalHold, report_body


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def request(tool: str = "delete_tag", session: str = "s") -> CheckRequest:
    return CheckRequest(session_id=session, tool=tool)


def refusal(retry_after: int | None = 3600, remaining: int = 0, **extra: object) -> Decision:
    return Decision(
        allowed=False,
        outcome=Outcome.QUOTA_EXCEEDED,
        session_id="s",
        tool="delete_tag",
        message="The tool 'delete_tag' was NOT run: spent.",
        category="write",
        remaining=remaining,
        retry_after_seconds=retry_after,
        **extra,  # type: ignore[arg-type]
    )


def test_a_hold_lasts_at_most_five_seconds() -> None:
    clock = Clock()
    hold = RefusalHold(clock, 30.0, 1000)  # asked for 30 s: capped at 5
    hold.learn(request(), refusal())
    held = hold.refuse(request())
    assert held is not None and held.refused_locally and held.message.endswith("spent.")
    clock.now += 4.9
    assert hold.refuse(request()) is not None
    clock.now += 0.2
    assert hold.refuse(request()) is None
    assert hold.report("s") == {"write": HeldReport(2)}


def test_a_hold_never_outlasts_retry_after() -> None:
    clock = Clock()
    hold = RefusalHold(clock, 5.0, 1000)
    hold.learn(request(), refusal(retry_after=1))
    assert hold.refuse(request()) is not None
    clock.now += 1.0
    assert hold.refuse(request()) is None


def test_a_hold_answers_at_most_hold_calls() -> None:
    hold = RefusalHold(Clock(), 5.0, 3)
    hold.learn(request(), refusal())
    answers = [hold.refuse(request()) for _ in range(5)]
    assert [a is not None for a in answers] == [True, True, True, False, False]


def test_other_sessions_and_unclassified_tools_are_asked() -> None:
    hold = RefusalHold(Clock(), 5.0, 10)
    hold.learn(request(), refusal())
    assert hold.refuse(request(session="other")) is None
    assert hold.refuse(request(tool="never_seen")) is None


def test_a_weighed_refusal_with_room_left_starts_no_hold() -> None:
    hold = RefusalHold(Clock(), 5.0, 10)
    hold.learn(request(), refusal(remaining=3))
    assert hold.refuse(request()) is None


def test_an_allowed_answer_ends_the_hold_and_a_lost_report_goes_back() -> None:
    hold = RefusalHold(Clock(), 5.0, 10)
    hold.learn(request(), refusal())
    assert hold.refuse(request()) is not None
    report = hold.report("s")
    hold.restore("s", report)
    assert hold.unreported() == 1
    allowed = Decision(
        allowed=True,
        outcome=Outcome.ALLOWED,
        session_id="s",
        tool="delete_tag",
        message="ok",
        category="write",
    )
    hold.learn(request(), allowed)
    assert hold.refuse(request()) is None


def test_a_held_refusal_names_the_tool_asked_now() -> None:
    hold = RefusalHold(Clock(), 5.0, 10)
    hold.learn(request(), refusal())
    hold.learn(request(tool="delete_tags"), refusal())  # the same category: write
    held = hold.refuse(request(tool="delete_tags"))
    assert held is not None and held.tool == "delete_tags"
    assert held.message == "The tool 'delete_tags' was NOT run: spent."


def test_the_report_carries_the_ticket_of_the_refusal_that_started_the_hold() -> None:
    """Defect class: what the client reports is trusted. The service counts a report only
    under the hold ticket its refusal carried: the client keeps it with the hold, sends it
    with the count, and drops it once reported."""
    hold = RefusalHold(Clock(), 5.0, 10)
    hold.learn(request(), refusal(hold_ticket="h1-ticket"))
    assert hold.refuse(request()) is not None
    assert hold.refuse(request()) is not None
    report = hold.report("s")
    assert report == {"write": HeldReport(2, "h1-ticket")}
    assert report_body(report) == {"write": {"count": 2, "ticket": "h1-ticket"}}
    assert hold.report("s") == {}  # taken: reported once, with its ticket


def test_a_report_put_back_keeps_its_ticket_and_a_newer_hold_brings_its_own() -> None:
    hold = RefusalHold(Clock(), 5.0, 10)
    hold.learn(request(), refusal(hold_ticket="first"))
    assert hold.refuse(request()) is not None
    hold.restore("s", hold.report("s"))  # the service did not answer
    assert hold.report("s") == {"write": HeldReport(1, "first")}
    hold.learn(request(), refusal(hold_ticket="second"))
    assert hold.refuse(request()) is not None
    hold.restore("s", {"write": HeldReport(1, "first")})
    assert hold.report("s") == {"write": HeldReport(2, "second")}


def test_a_report_without_a_ticket_goes_bare() -> None:
    assert report_body({"write": HeldReport(3)}) == {"write": 3}
