"""Exactly-once writes over real HTTP, against the service as `make run` starts it: the
client keeps a write's result, a retry gets it back; a read's retry carries no replay."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from mcp_quota_client import QuotaClient, QuotaClientConfig
from mcp_quota_client.decision import Decision, Outcome
from mcp_quota_client.exactly_once import ExactlyOnce
from mcp_quota_client.guard import GuardedCall, ToolCallGuard
from mcp_quota_client.results import REPLAYED_META, ReplayState, keep_result, replay_of
from mcp_quota_client.session import SessionIdentity, SessionSource
from mcp_types import CallToolResult

from tests.e2e.http import SERVER_TOKEN, call
from tests.support import running_service

pytestmark = pytest.mark.e2e

RESULT = {"content": [{"type": "text", "text": "deleted tag 7"}], "isError": False}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_service() as base:
        yield base


def check(url: str, **body: object) -> dict[str, object]:
    reply = call(f"{url}/v1/check", "POST", body)
    assert reply.status == 200, reply
    answer = reply.body
    assert isinstance(answer, dict)
    return answer


async def keep(url: str, call_id: str, session: str) -> tuple[int, str | None]:
    headers = {"Authorization": f"Bearer {SERVER_TOKEN}"}
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
        kept = await keep_result(http, session, call_id, "delete_tag", RESULT)
    return kept.status, kept.stored


def test_a_kept_write_result_is_replayed_over_http(url: str) -> None:
    """Defect class: a retried write runs the tool again (nothing kept to answer with)."""
    write = {"session_id": "e2e-r", "tool": "delete_tag", "call_id": "id/with?#%"}
    assert replay_of(check(url, **write)) is None
    running = replay_of(check(url, **write))
    assert running is not None and running.state is ReplayState.RUNNING
    assert asyncio.run(keep(url, "id/with?#%", "e2e-r")) == (201, "stored")
    assert asyncio.run(keep(url, "id/with?#%", "e2e-r")) == (200, "same")
    stored = replay_of(check(url, **write))
    assert stored is not None and stored.state is ReplayState.STORED
    assert stored.result == RESULT
    assert asyncio.run(keep(url, "never-checked", "e2e-r"))[0] == 403


def test_a_read_retry_carries_no_replay_over_http(url: str) -> None:
    read = {"session_id": "e2e-r", "tool": "search_articles", "call_id": "r-1"}
    check(url, **read)
    again = check(url, **read)
    assert again["duplicate"] is True and "replay" not in again


def copy_of(session: str, call_id: str) -> GuardedCall:
    """A copy's check answered `replay: running`, as the MCP side holds it."""
    decision = Decision(
        allowed=True,
        outcome=Outcome.ALLOWED,
        session_id=session,
        tool="delete_tag",
        message="allowed",
        duplicate=True,
        raw={"replay": {"state": "running"}},
    )
    return GuardedCall(decision, SessionIdentity(session, SessionSource.META), None, call_id)


def test_a_copy_waits_for_a_running_calls_result_past_its_duplicates(url: str) -> None:
    """Defect class: a copy waiting for a call still running checked again after each
    pause, and each check of a copy is one of the call's 3 duplicates: at the 4th, about
    1.4 s in, the id was used up and the agent heard "in progress", though the result was
    kept a moment later. The wait now reads the kept result, which uses no duplicate."""
    write = {"session_id": "e2e-w", "tool": "delete_tag", "call_id": "slow-1"}
    check(url, **write)  # the first run starts (its tool takes 2.5 s)
    copy = replay_of(check(url, **write))  # a copy of it, sent meanwhile: its 1st duplicate
    assert copy is not None and copy.state is ReplayState.RUNNING
    client = QuotaClient(QuotaClientConfig(base_url=url, token=SERVER_TOKEN))
    once = ExactlyOnce(ToolCallGuard(client), wait_seconds=10)

    async def copy_while_the_first_runs() -> CallToolResult | None:
        async def first_run_ends() -> None:
            await anyio.sleep(2.5)
            assert await keep(url, "slow-1", "e2e-w") == (201, "stored")

        async with anyio.create_task_group() as runs:
            runs.start_soon(first_run_ends)
            answer = await once.answer(copy_of("e2e-w", "slow-1"))
        return answer

    answer = asyncio.run(copy_while_the_first_runs())
    assert answer is not None and not answer.is_error, answer
    assert (answer.meta or {}).get(REPLAYED_META) is True
    # Reading used none of its duplicates: the copies still get them.
    assert check(url, **write)["duplicate"] is True
