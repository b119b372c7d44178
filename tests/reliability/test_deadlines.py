"""The budget chain, end to end: a frozen store reaches the client as the service's 503,
and the client applies its fail mode within its one deadline (docs/operations.md)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace

import httpx2
import pytest
from mcp_quota_client import CheckRequest, Outcome, QuotaClient, QuotaClientConfig

from chalicelib.wiring import (
    CLIENT_CONFIG,
    STORE_ATTEMPTS,
    STORE_CONNECT_SECONDS,
    STORE_READ_SECONDS,
)
from tests.support import dynalite_process, running_service

pytestmark = pytest.mark.anyio

READ = CheckRequest(session_id="frozen-1", tool="list_tags", category="read")
WRITE = CheckRequest(session_id="frozen-1", tool="delete_tag", category="write")
# botocore's backoff between the two attempts after a timeout: at most 25 ms for DynamoDB.
STORE_BACKOFF_SECONDS = 0.025


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def service_on_dynalite() -> Iterator[tuple[str, int]]:
    """`make run` over a dynalite of this test's own; yields the URL and dynalite's pid."""
    with (
        dynalite_process() as (endpoint, proc),
        running_service({"AWS_ENDPOINT_URL": endpoint}) as url,
    ):
        yield url, proc.pid


def test_the_store_budget_is_inside_the_client_deadline() -> None:
    worst = STORE_ATTEMPTS * (STORE_CONNECT_SECONDS + STORE_READ_SECONDS) + STORE_BACKOFF_SECONDS
    assert CLIENT_CONFIG.read_timeout == STORE_READ_SECONDS  # type: ignore[attr-defined]
    assert worst < QuotaClientConfig(base_url="http://x", token="t").deadline


async def test_a_frozen_store_gives_a_503_and_the_fail_mode_within_the_deadline(
    service_on_dynalite: tuple[str, int],
) -> None:
    url, store_pid = service_on_dynalite
    config = QuotaClientConfig(base_url=url, token="dev-server-token", lease=False)
    async with QuotaClient(config) as client:
        assert (await client.check(READ)).outcome is Outcome.ALLOWED
        os.kill(store_pid, signal.SIGSTOP)
        try:
            async with QuotaClient(replace(config, max_attempts=1)) as once:
                started = time.monotonic()
                first = await once.check(READ)
                service_seconds = time.monotonic() - started
            started = time.monotonic()
            read = await client.check(READ)
            read_seconds = time.monotonic() - started
            started = time.monotonic()
            write = await client.check(WRITE)
            write_seconds = time.monotonic() - started
        finally:
            os.kill(store_pid, signal.SIGCONT)
        after = await client.check(WRITE)

    print(
        f"frozen store: the service's 503 after {service_seconds:.2f}s; "
        f"client read {read_seconds:.2f}s, write {write_seconds:.2f}s, "
        f"attempts {read.attempts}/{write.attempts}, deadline {config.deadline}s"
    )
    assert (first.outcome, first.http_status) == (Outcome.FAIL_OPEN, 503)
    assert service_seconds < config.deadline
    assert (read.outcome, read.http_status) == (Outcome.FAIL_OPEN, 503)
    assert (write.outcome, write.http_status) == (Outcome.FAIL_CLOSED, 503)
    # The client stops itself at the deadline; the margin is the event loop's, not a wait.
    assert read_seconds < config.deadline + 0.5
    assert write_seconds < config.deadline + 0.5
    assert after.outcome is Outcome.ALLOWED


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
