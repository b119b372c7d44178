"""Issue 32 at the MCP side, the pure parts: what a replay becomes, how long a copy of a
running call asks again, and what an approval becomes for each kind of client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mcp_types as mt
import pytest
from mcp_quota_client import QuotaClient, QuotaClientConfig
from mcp_quota_client.approval_answer import (
    INPUT_KEY,
    accepts_url_elicitation,
    approval_answer,
    declined,
)
from mcp_quota_client.decision import CheckRequest, Decision, Outcome
from mcp_quota_client.exactly_once import (
    ExactlyOnce,
    replay_in,
    replay_wait_from_env,
    replayed_result,
)
from mcp_quota_client.guard import MAX_PREVIEW, GuardedCall, ToolCallGuard, preview
from mcp_quota_client.results import REPLAYED_META, Replay, ReplayState
from mcp_quota_client.service_policy import RuleCosts
from mcp_quota_client.session import SessionIdentity, SessionSource
from mcp_quota_client.wire import approval_asked

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
URL = "https://quota.example/console#/approvals/ap_1"
KEPT = {"content": [{"type": "text", "text": "deleted 7"}], "isError": False, "_meta": {"x": 1}}


def guarded(**raw: Any) -> GuardedCall:
    allowed = raw.pop("allowed", True)
    decision = Decision(
        allowed=allowed,
        outcome=Outcome.ALLOWED if allowed else Outcome.REJECTED,
        session_id="s",
        tool="delete_tag",
        message=raw.pop("message", "refused"),
        duplicate=raw.pop("duplicate", allowed),
        error_code=raw.pop("code", None),
        raw=raw,
    )
    return GuardedCall(
        decision, SessionIdentity("s", SessionSource.META), None, "c-1", "alice", "d"
    )


def guard() -> ToolCallGuard:
    client = QuotaClient(QuotaClientConfig(base_url="http://127.0.0.1:9", token="t"))
    return ToolCallGuard(client)


def test_a_kept_result_comes_back_unchanged_but_marked_replayed() -> None:
    """Defect class: a replay the agent cannot tell from a run, or a rewritten result."""
    result = replayed_result(Replay(ReplayState.STORED, KEPT), "delete_tag", "c-1")
    assert not result.is_error
    assert result.content == [mt.TextContent(type="text", text="deleted 7")]
    assert result.meta == {"x": 1, REPLAYED_META: True}


def test_a_result_not_kept_or_unreadable_says_the_call_ran_and_was_not_run_again() -> None:
    """Defect class: a retry of a large result's call runs it again."""
    big = replayed_result(
        Replay(ReplayState.NOT_KEPT, message="It ran; NOT run again.", digest="ab"),
        "delete_tag",
        "c-1",
    )
    assert big.is_error and big.structured_content == {
        "kind": "result_not_kept",
        "callId": "c-1",
        "digest": "ab",
    }
    assert (big.meta or {})[REPLAYED_META] is True
    odd = replayed_result(Replay(ReplayState.STORED, {"content": "no"}), "delete_tag", "c-1")
    assert odd.is_error and "NOT run again" in str(odd.content[0])


def test_a_running_call_is_in_progress_and_says_to_keep_the_call_id() -> None:
    """Defect class: an agent told to retry under a new id (a second run)."""
    result = replayed_result(Replay(ReplayState.RUNNING), "delete_tag", "c-1")
    assert result.is_error and (result.structured_content or {})["kind"] == "call_in_progress"
    text = result.content[0]
    assert isinstance(text, mt.TextContent)
    assert "Do NOT send it under a new call id" in text.text and "'c-1'" in text.text


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def scripted(*answers: GuardedCall | None) -> Any:
    """Reads of the kept result answering, in turn, as these checks would (None: the
    read failed)."""
    pending: Iterator[GuardedCall | None] = iter(answers)

    async def poll() -> Replay | None:
        answer = next(pending)
        return None if answer is None else replay_in(answer)

    return poll


async def test_a_copy_asks_again_with_longer_pauses_until_the_result_is_kept() -> None:
    clock = Clock()
    once = ExactlyOnce(guard(), wait_seconds=10, sleep=clock.sleep, clock=clock)
    running = guarded(replay={"state": "running"})
    stored = guarded(replay={"state": "stored", "result": KEPT})
    answer = await once.answer(running, poll=scripted(running, running, stored))
    assert answer is not None and not answer.is_error
    assert clock.pauses == [0.2, 0.4, 0.8]


async def test_a_copy_stops_asking_at_its_wait_or_at_any_other_answer() -> None:
    """Defect class: a copy that waits forever, or runs the tool on a refusal."""
    clock = Clock()
    once = ExactlyOnce(guard(), wait_seconds=3, sleep=clock.sleep, clock=clock)
    running = guarded(replay={"state": "running"})
    answer = await once.answer(running, poll=scripted(*[running] * 10))
    assert answer is not None and (answer.structured_content or {})["kind"] == "call_in_progress"
    assert sum(clock.pauses) <= 3
    clock.pauses.clear()
    answer = await once.answer(running, poll=scripted(None))  # the read failed
    assert answer is not None and (answer.structured_content or {})["kind"] == "call_in_progress"
    assert clock.pauses == [0.2]


async def test_a_first_call_or_a_read_duplicate_runs_the_tool() -> None:
    once = ExactlyOnce(guard(), wait_seconds=0)
    assert await once.answer(guarded(duplicate=False), poll=scripted()) is None
    assert await once.answer(guarded(), poll=scripted()) is None  # no replay: a read


def test_the_wait_is_read_from_the_environment() -> None:
    assert replay_wait_from_env({}) == 10.0
    assert replay_wait_from_env({"MCP_QUOTA_REPLAY_WAIT_SECONDS": "0"}) == 0.0
    with pytest.raises(ValueError, match="MCP_QUOTA_REPLAY_WAIT_SECONDS"):
        replay_wait_from_env({"MCP_QUOTA_REPLAY_WAIT_SECONDS": "900"})


def asked(**approval: Any) -> GuardedCall:
    body = {"id": "ap_1", "expires_at": "2026-12-04T20:15:00Z", "console_url": URL, **approval}
    return guarded(allowed=False, code="approval_required", approval=body)


def capabilities(url: bool) -> mt.ClientCapabilities:
    modes = mt.ElicitationCapability(
        form=mt.FormElicitationCapability(), url=mt.UrlElicitationCapability() if url else None
    )
    return mt.ClientCapabilities(elicitation=modes)


def test_only_a_modern_request_from_a_client_with_url_elicitation_gets_input_required() -> None:
    """Defect class: an input request type the client did not declare."""
    assert accepts_url_elicitation(MODERN, capabilities(url=True))
    assert not accepts_url_elicitation(MODERN, capabilities(url=False))
    assert not accepts_url_elicitation(MODERN, mt.ClientCapabilities())
    assert not accepts_url_elicitation(MODERN, None)
    assert not accepts_url_elicitation("2025-11-25", capabilities(url=True))


def test_an_approval_becomes_a_url_elicitation_with_the_call_id_sealed() -> None:
    """Defect class: the approval's retry is a new call (another call id)."""
    g = guard()
    answer = approval_answer(g, asked(), url_elicitation=True)
    assert isinstance(answer, mt.InputRequiredResult)
    [(key, request)] = (answer.input_requests or {}).items()
    assert key == INPUT_KEY and isinstance(request, mt.ElicitRequest)
    assert isinstance(request.params, mt.ElicitRequestURLParams)
    assert request.params.url == URL and "ap_1" in request.params.message
    assert answer.request_state is not None
    opened = g.states.open(answer.request_state, "alice", "d")
    assert opened is not None and opened.call_id == "c-1"


def test_without_url_elicitation_the_agent_is_told_to_ask_its_user() -> None:
    """Defect class: the approval's URL never reaches a person."""
    answer = approval_answer(guard(), asked(), url_elicitation=False)
    assert isinstance(answer, mt.CallToolResult) and answer.is_error
    text = answer.content[0]
    assert isinstance(text, mt.TextContent)
    assert URL in text.text and "Ask your user" in text.text and "same arguments" in text.text
    assert answer.structured_content == {
        "kind": "approval_required",
        "approvalId": "ap_1",
        "url": URL,
        "expiresAt": "2026-12-04T20:15:00Z",
    }


def test_a_declined_elicitation_is_not_asked_again() -> None:
    """Defect class: a client looping on an elicitation its user declined."""
    responses = {INPUT_KEY: mt.ElicitResult(action="decline")}
    assert declined(responses) and declined({INPUT_KEY: {"action": "cancel"}})
    assert not declined({INPUT_KEY: mt.ElicitResult(action="accept")}) and not declined(None)
    answer = approval_answer(guard(), asked(), url_elicitation=True, input_responses=responses)
    assert isinstance(answer, mt.CallToolResult) and answer.is_error


def test_only_an_approval_with_an_http_url_is_answered_as_one() -> None:
    assert approval_asked(asked(console_url="javascript:alert(1)").decision) is None
    assert approval_asked(asked(id=None).decision) is None
    assert approval_answer(guard(), guarded(allowed=False, code="quota_exceeded"), True) is None
    denied = approval_answer(
        guard(), guarded(allowed=False, code="approval_denied", message="Denied: no."), True
    )
    assert isinstance(denied, mt.CallToolResult) and denied.is_error
    assert denied.structured_content == {"kind": "approval_denied"}


def test_only_a_tool_that_needs_an_approval_sends_its_arguments_cut_to_the_limit() -> None:
    """Defect class: the approver cannot see what they approve, or every call's
    arguments leave the server."""
    rules = RuleCosts(
        [
            {"category": "write", "tools": ["drop_table"], "approval": True},
            {"category": "write", "pattern": "drop_*"},
        ]
    )
    assert rules.needs_approval("drop_table") and not rules.needs_approval("drop_view")
    assert preview({"table": "users", "why": "ünïcode"}) == '{"table": "users", "why": "ünïcode"}'
    cut = preview({"rows": "x" * 5000})
    assert len(cut) == MAX_PREVIEW and cut.endswith("…")
    request = CheckRequest(session_id="s", tool="drop_table", arguments_preview="{}")
    assert request.to_json()["arguments_preview"] == "{}"
    assert "arguments_preview" not in CheckRequest(session_id="s", tool="t").to_json()


async def test_a_replay_carries_the_duplicates_decision_like_any_allowed_call() -> None:
    """Defect class: a replayed result without the decision `_meta` (or the session the
    service minted), unlike every other allowed call's."""
    once = ExactlyOnce(guard(), wait_seconds=0)
    stored = guarded(replay={"state": "stored", "result": KEPT})
    entry = {"io.mcp-quota/decision": {"duplicate": True}, "io.mcp-quota/session": "tok"}
    with_meta = GuardedCall(stored.decision, stored.identity, entry, "c-1", "alice", "d")
    answer = await once.answer(with_meta, poll=scripted())
    assert answer is not None
    assert answer.meta == {"x": 1, REPLAYED_META: True, **entry}
