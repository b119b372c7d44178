"""The budget chain: the store's retries fit inside the client's one deadline, and the
client retries a gateway's 429 or 5xx, then applies its fail mode (docs/operations.md).
A frozen store, end to end: tests/e2e/test_frozen_store.py."""

from __future__ import annotations

import httpx2
import pytest
from mcp_quota_client import CheckRequest, Outcome, QuotaClient, QuotaClientConfig

from chalicelib.aws import (
    CLIENT_CONFIG,
    STORE_ATTEMPTS,
    STORE_CONNECT_SECONDS,
    STORE_READ_SECONDS,
)

pytestmark = pytest.mark.anyio

READ = CheckRequest(session_id="frozen-1", tool="list_tags", category="read")
WRITE = CheckRequest(session_id="frozen-1", tool="delete_tag", category="write")
# botocore's backoff between the two attempts after a timeout: at most 25 ms for DynamoDB.
STORE_BACKOFF_SECONDS = 0.025


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_store_budget_is_inside_the_client_deadline() -> None:
    worst = STORE_ATTEMPTS * (STORE_CONNECT_SECONDS + STORE_READ_SECONDS) + STORE_BACKOFF_SECONDS
    assert CLIENT_CONFIG.read_timeout == STORE_READ_SECONDS  # type: ignore[attr-defined]
    assert worst < QuotaClientConfig(base_url="http://x", token="t").deadline


def _scripted(*statuses: int) -> tuple[httpx2.MockTransport, list[int]]:
    """A transport answering `statuses` in turn, then a real-looking allowance."""
    script, seen = list(statuses), list[int]()

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(len(seen) + 1)
        if script:
            status = script.pop(0)
            if status == 429:  # the gateway's throttle: its static body, no decision
                body = {"error": {"code": "throttled", "message": "Too many requests"}}
                return httpx2.Response(429, json=body, headers={"Retry-After": "1"})
            return httpx2.Response(status, json={"error": {"code": "internal_error"}})
        allowed = {
            "allowed": True,
            "session_id": "s",
            "tool": "t",
            "category": "write",
            "used": 1,
            "limit": 10,
            "remaining": 9,
        }
        return httpx2.Response(200, json=allowed)

    return httpx2.MockTransport(answer), seen


async def _no_wait(seconds: float) -> None:
    return None


async def test_a_gateway_429_or_5xx_is_retried_then_answered() -> None:
    transport, seen = _scripted(429, 502, 500)
    config = QuotaClientConfig(base_url="http://quota", token="t", max_attempts=4, lease=False)
    async with QuotaClient(config, transport=transport, sleep=_no_wait) as client:
        decision = await client.check(WRITE)

    assert (decision.outcome, decision.attempts, len(seen)) == (Outcome.ALLOWED, 4, 4)
    assert client.stats().retries == 3


async def test_a_gateway_429_on_every_attempt_applies_the_fail_mode() -> None:
    transport, seen = _scripted(429, 429, 429, 429, 429, 429)
    config = QuotaClientConfig(base_url="http://quota", token="t", max_attempts=3, lease=False)
    async with QuotaClient(config, transport=transport, sleep=_no_wait) as client:
        write = await client.check(WRITE)
        read = await client.check(READ)

    assert (write.outcome, write.http_status, write.attempts) == (Outcome.FAIL_CLOSED, 429, 3)
    assert "throttled" in write.message
    assert read.outcome is Outcome.FAIL_OPEN
    assert len(seen) == 6


async def test_a_call_in_progress_is_asked_again_after_retry_after() -> None:
    """Issue 28: a copy of a call still being counted gets 409 call_in_progress; the client
    waits the Retry-After it names, within its deadline, and asks again."""
    answers = [
        httpx2.Response(
            409,
            json={"error": {"code": "call_in_progress", "message": "being counted"}},
            headers={"Retry-After": "1"},
        )
    ]
    paused: list[float] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        if answers:
            return answers.pop(0)
        body = {"allowed": True, "session_id": "s", "tool": "t", "category": "write"}
        return httpx2.Response(200, json={**body, "used": 1, "limit": 10, "remaining": 9})

    async def sleep(seconds: float) -> None:
        paused.append(seconds)

    config = QuotaClientConfig(base_url="http://quota", token="t", lease=False)
    transport = httpx2.MockTransport(answer)
    async with QuotaClient(config, transport=transport, sleep=sleep) as client:
        decision = await client.check(WRITE)
    assert (decision.outcome, decision.attempts, paused) == (Outcome.ALLOWED, 2, [1.0])


async def test_a_call_id_conflict_says_the_service_words_not_a_configuration_problem() -> None:
    words = "The tool 'delete_tag' was NOT run: call id 'c-1' names another call."
    body = {"error": {"code": "call_id_conflict", "message": words}}
    transport = httpx2.MockTransport(lambda request: httpx2.Response(409, json=body))
    config = QuotaClientConfig(base_url="http://quota", token="t", lease=False)
    async with QuotaClient(config, transport=transport, sleep=_no_wait) as client:
        decision = await client.check(WRITE)
    assert (decision.outcome, decision.message) == (Outcome.REJECTED, words)
