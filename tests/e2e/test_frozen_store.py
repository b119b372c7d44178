"""The budget chain, end to end: a frozen store reaches the client as the service's 503,
and the client applies its fail mode within its one deadline (docs/operations.md)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from mcp_quota_client import CheckRequest, Outcome, QuotaClient, QuotaClientConfig

from tests.e2e.http import ADMIN_TOKEN, call
from tests.support import dynalite_process, running_service

pytestmark = pytest.mark.anyio

READ = CheckRequest(session_id="frozen-1", tool="list_tags", category="read")
WRITE = CheckRequest(session_id="frozen-1", tool="delete_tag", category="write")


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


FREEZE_SECONDS = 12.0  # as the issue has it: longer than the client's whole deadline (5 s)


def test_a_check_answers_by_its_deadline_and_nothing_stays_counted(
    service_on_dynalite: tuple[str, int],
) -> None:
    """Issue 33, item 3: deadlines that nest. The store freezes under a check: the
    service answers 503 with Retry-After within 4.5 s (inside the client's 5 s), and the
    count it sent before the freeze, which the store applies when it wakes, is taken back
    by the session's next check: nothing of the answered 503 stays counted."""
    url, store_pid = service_on_dynalite
    body = {
        "session_id": "frozen-2",
        "tool": "delete_tag",
        "principal": "frozen-bot",
        "call_id": "c-frozen",
        "args_digest": "e" * 64,
    }
    assert call(f"{url}/v1/check", "POST", {**body, "call_id": "warm"}).status == 200
    os.kill(store_pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        started = time.monotonic()
        answer = call(f"{url}/v1/check", "POST", body)
        seconds = time.monotonic() - started
        time.sleep(max(0.0, FREEZE_SECONDS - (time.monotonic() - frozen_at)))
    finally:
        os.kill(store_pid, signal.SIGCONT)
    print(f"frozen store: 503 after {seconds:.2f}s")
    assert answer.status == 503 and int(answer.headers["Retry-After"]) >= 1
    assert seconds < 4.5
    retry = call(f"{url}/v1/check", "POST", body)  # the client's retry, the store awake
    assert retry.status == 200 and not retry.body["duplicate"], retry.body
    assert retry.body["used"] == 2  # the warm-up call and this one: the 503 left nothing
    principal = call(f"{url}/v1/principals/frozen-bot", token=ADMIN_TOKEN).body
    assert principal["categories"]["write"]["used"] == 2
