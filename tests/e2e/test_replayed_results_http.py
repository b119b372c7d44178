"""Exactly-once writes over real HTTP, against the service as `make run` starts it: the
client keeps a write's result, a retry gets it back; a read's retry carries no replay."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx2
import pytest
from mcp_quota_client.results import ReplayState, keep_result, replay_of

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
