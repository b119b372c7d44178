"""Exactly-once writes, the client's part: keep a tool's result in the service after it
ran (`PUT /v1/results/{call_id}`), read the `replay` of a duplicate's check answer, and
read it again while the first run goes on (`GET /v1/results/{call_id}`).
What to do with a replay (hand back the result marked `_meta["io.mcp-quota/replayed"]`,
wait, or tell the agent) is the middleware's and the proxy's: docs/exactly-once.md."""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx2

logger = logging.getLogger("mcp_quota_client")

REPLAYED_META = "io.mcp-quota/replayed"  # what the MCP side marks a replayed result with


class ReplayState(enum.StrEnum):
    """What the service answered a duplicate of an allowed call with."""

    STORED = "stored"  # `result` is the first run's: hand it back, do not run the tool
    RUNNING = "running"  # no result kept yet: wait and check again, or say in progress
    NOT_KEPT = "not_kept"  # it ran, its result was over 64 KiB: `message` says so


@dataclass(frozen=True)
class Replay:
    """The `replay` field of a check answer."""

    state: ReplayState
    result: Mapping[str, Any] | None = None
    message: str | None = None
    digest: str | None = None


def replay_of(answer: Mapping[str, Any]) -> Replay | None:
    """The replay a check answer's JSON carries (None: none, or one this client does not
    know, which the caller treats as an ordinary duplicate)."""
    raw = answer.get("replay")
    if not isinstance(raw, Mapping):
        return None
    try:
        state = ReplayState(str(raw.get("state")))
    except ValueError:
        return None
    result = raw.get("result")
    if state is ReplayState.STORED and not isinstance(result, Mapping):
        return None
    message, digest = raw.get("message"), raw.get("digest")
    return Replay(
        state,
        result if isinstance(result, Mapping) else None,
        message if isinstance(message, str) else None,
        digest if isinstance(digest, str) else None,
    )


@dataclass(frozen=True)
class Kept:
    """What keeping a result did: `stored` ("stored", "same"), or None when it failed
    (`status` says how; 0: no answer)."""

    status: int
    stored: str | None = None
    truncated: bool = False


async def keep_result(
    http: httpx2.AsyncClient,
    session_id: str,
    call_id: str,
    tool: str,
    result: Mapping[str, Any],
) -> Kept:
    """Keep an allowed call's result under its call id, best effort: the tool has run,
    so a failure here only means its retries will hear "running", never a second run.
    `http` carries the service's base URL and the server token."""
    body = {"session_id": session_id, "tool": tool, "result": dict(result)}
    try:
        response = await http.put(f"/v1/results/{quote(call_id, safe='')}", json=body)
    except Exception as exc:  # best effort, as a lease return is
        logger.info("mcp-quota: keeping a result failed (%s)", exc)
        return Kept(0)
    if response.status_code not in (200, 201):
        logger.info("mcp-quota: keeping a result answered %s", response.status_code)
        return Kept(response.status_code)
    answer = response.json()
    return Kept(response.status_code, str(answer.get("stored")), bool(answer.get("truncated")))


async def read_replay(http: httpx2.AsyncClient, session_id: str, call_id: str) -> Replay | None:
    """What a copy of the call would be answered with now (`GET /v1/results/{call_id}`):
    a read that uses none of the call's duplicates, as checking again would. None when the
    service could not say (the caller stops waiting: the call is in progress)."""
    try:
        response = await http.get(
            f"/v1/results/{quote(call_id, safe='')}", params={"session_id": session_id}
        )
    except Exception as exc:  # best effort: the wait ends, the agent hears "in progress"
        logger.info("mcp-quota: reading a kept result failed (%s)", exc)
        return None
    if response.status_code != 200:
        logger.info("mcp-quota: reading a kept result answered %s", response.status_code)
        return None
    answer = response.json()
    return replay_of(answer) if isinstance(answer, Mapping) else None
