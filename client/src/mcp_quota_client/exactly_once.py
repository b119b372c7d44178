"""Exactly-once writes at the MCP side (issue 32): after an allowed call of a replaying
category ran, its result is kept in the service under the call id; a retry under that id
is answered with it, marked `_meta["io.mcp-quota/replayed"]: true`, and the tool does
not run again. A copy that finds the first run still going waits (asking the service
again) within its wait, then is told the call is in progress.

Framework-free: the FastMCP middleware and the proxy hand it wire `CallToolResult`s.
What the service keeps and answers is docs/exactly-once.md.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as mt
from pydantic import ValidationError

from mcp_quota_client.decision import Outcome
from mcp_quota_client.guard import GuardedCall, ToolCallGuard
from mcp_quota_client.results import (
    REPLAYED_META,
    Replay,
    ReplayState,
    keep_result,
    read_replay,
    replay_of,
)
from mcp_quota_client.service_policy import ServicePolicy

logger = logging.getLogger("mcp_quota_client")

REPLAY_WAIT_ENV = "MCP_QUOTA_REPLAY_WAIT_SECONDS"
DEFAULT_REPLAY_WAIT = 10.0
"""Seconds a copy waits for the first run's result before it is told "in progress"."""
FIRST_PAUSE = 0.2
MAX_PAUSE = 2.0
"""Pauses between asking again: each ask is a duplicate's check, so they double."""

# Reads what a copy of the call would be answered with now (None: no answer to wait on).
Poll = Callable[[], Awaitable[Replay | None]]
"""The same call's check again (same call id, session and arguments)."""


def replay_wait_from_env(environ: Mapping[str, str] | None = None) -> float:
    """`MCP_QUOTA_REPLAY_WAIT_SECONDS`, else 10 (0: never wait).

    Raises:
        ValueError: the variable is not a number of seconds from 0 to 300.
    """
    raw = (os.environ if environ is None else environ).get(REPLAY_WAIT_ENV, "").strip()
    if not raw:
        return DEFAULT_REPLAY_WAIT
    seconds = float(raw)
    if not 0 <= seconds <= 300:
        raise ValueError(f"mcp-quota: {REPLAY_WAIT_ENV} must be from 0 to 300 seconds")
    return seconds


def replay_in(guarded: GuardedCall) -> Replay | None:
    """The replay an allowed duplicate's answer carries (None: run the tool as before)."""
    decision = guarded.decision
    if not decision.allowed or not decision.duplicate:
        return None
    return replay_of(decision.raw)


def wire(result: mt.CallToolResult | Mapping[str, Any]) -> dict[str, Any]:
    """A `CallToolResult` as it goes on the wire (the form the service keeps); a result
    already in that form (the proxy's, as the upstream sent it) as it is."""
    if isinstance(result, mt.CallToolResult):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(result)


def _told(text: str, structured: dict[str, Any], replayed: bool) -> mt.CallToolResult:
    meta = {REPLAYED_META: True} if replayed else None
    return mt.CallToolResult(
        content=[mt.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=True,
        _meta=meta,
    )


def in_progress(tool: str, call_id: str | None) -> mt.CallToolResult:
    """What a copy of a call still running from an earlier request is told."""
    text = (
        f"The tool '{tool}' was NOT run again: this very call (call id {call_id!r}) is still "
        "running from an earlier request and has no result yet. Retry the same call, with "
        "the same call id and arguments, in a few seconds to get its result. Do NOT send "
        "it under a new call id: that would run it a second time."
    )
    return _told(text, {"kind": "call_in_progress", "callId": call_id}, replayed=False)


def replayed_result(replay: Replay, tool: str, call_id: str | None) -> mt.CallToolResult:
    """The answer to a copy of a call that already ran: its kept result marked replayed,
    the service's words for a result too large to keep, or "still in progress"."""
    if replay.state is ReplayState.STORED and replay.result is not None:
        try:
            kept = mt.CallToolResult.model_validate(dict(replay.result))
        except ValidationError:
            logger.warning("mcp-quota: the kept result of call %r is no tool result", call_id)
        else:
            meta = {**(kept.meta or {}), REPLAYED_META: True}
            return kept.model_copy(update={"meta": meta})
        text = (
            f"The tool '{tool}' was NOT run again: this call (call id {call_id!r}) already "
            "ran, but its kept result could not be read. Read the current state with a read "
            "tool instead of retrying."
        )
        return _told(text, {"kind": "result_not_kept", "callId": call_id}, replayed=True)
    if replay.state is ReplayState.NOT_KEPT:
        text = replay.message or (
            f"The tool '{tool}' was NOT run again: this call already ran and its result was "
            "not kept. Read the current state with a read tool instead of retrying."
        )
        structured = {"kind": "result_not_kept", "callId": call_id, "digest": replay.digest}
        return _told(text, structured, replayed=True)
    return in_progress(tool, call_id)


@dataclass
class ExactlyOnce:
    """Keeps results of allowed calls, and answers their retries with them."""

    guard: ToolCallGuard
    wait_seconds: float = field(default_factory=replay_wait_from_env)
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    clock: Callable[[], float] = time.monotonic

    async def answer(
        self, guarded: GuardedCall, continuing: bool = False, poll: Poll | None = None
    ) -> mt.CallToolResult | None:
        """The answer to a retry of a call that already ran, or None: run the tool.

        A copy that finds no result yet reads it again (`poll`; by default
        `GET /v1/results/{call_id}`, which, unlike checking again, uses none of the call's
        duplicates), pausing longer each time, until the result is kept or `wait_seconds`
        would pass; a failed read ends the wait: it is in progress.
        `continuing`: the request carried our sealed `requestState` back (an MRTR
        retry): with no result kept, its tool answered `input_required` last time and
        now goes on, so it runs.
        """
        replay = replay_in(guarded)
        if replay is None or (continuing and replay.state is ReplayState.RUNNING):
            return None
        poll = poll or self._reader(guarded)
        until = self.clock() + self.wait_seconds
        pause = FIRST_PAUSE
        while replay.state is ReplayState.RUNNING and self.clock() + pause <= until:
            await self.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE)
            again = await poll()
            if again is None:
                break
            replay = again
        result = replayed_result(replay, guarded.decision.tool, guarded.call_id)
        if guarded.meta is None:
            return result
        # As on any allowed call: the decision (a duplicate) and a minted session.
        return result.model_copy(update={"meta": {**(result.meta or {}), **guarded.meta}})

    def _reader(self, guarded: GuardedCall) -> Poll:
        """Reads the replay of this very call (its session and the call id it was
        checked with) from the service."""
        session_id, call_id = guarded.decision.session_id, guarded.call_id

        async def read() -> Replay | None:
            if call_id is None:
                return None
            return await read_replay(self.guard.client._client(), session_id, call_id)

        return read

    async def keep(
        self,
        guarded: GuardedCall,
        policy: ServicePolicy | None,
        result: mt.CallToolResult | Mapping[str, Any],
        continuing: bool = False,
    ) -> None:
        """Keep the result of a call the service allowed and counted (just now, or in an
        earlier MRTR round: `continuing`), when its category replays and the client can
        retry it (`retry_key`): before the result is answered, so a retry finds it. Best
        effort: a failure means its retries hear "in progress", never a second run."""
        decision = guarded.decision
        ran = decision.outcome is Outcome.ALLOWED and (continuing or not decision.duplicate)
        if not ran or decision.from_lease or guarded.retry_key is None or policy is None:
            return
        if not await policy.replays(decision.category):
            return
        http = self.guard.client._client()
        await keep_result(http, decision.session_id, guarded.retry_key, decision.tool, wire(result))
