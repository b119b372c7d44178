"""QuotaClient against a real loopback HTTP server: parsing, retries, fail modes."""

from __future__ import annotations

import logging
import subprocess
import sys
from datetime import UTC

import pytest
from mcp_quota_client import (
    CheckRequest,
    FailMode,
    Outcome,
    QuotaClient,
    QuotaClientConfig,
)

from tests.mcp.conftest import TOKEN, ClientFactory, FakeQuotaService, Scripted

pytestmark = pytest.mark.anyio

WRITE = CheckRequest(session_id="s1", tool="delete_tag", annotations={"destructiveHint": True})
READ = CheckRequest(session_id="s1", tool="search_articles", annotations={"readOnlyHint": True})


async def test_allowed_decision_carries_the_service_fields(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    client = make_client()
    request = CheckRequest(
        session_id="s1",
        tool="delete_tag",
        annotations={"destructiveHint": True, "title": "Delete"},
        principal="alice",
        call_id="call-1",
    )

    decision = await client.check(request)

    assert decision.allowed is True
    assert decision.outcome is Outcome.ALLOWED
    assert (decision.category, decision.used, decision.limit, decision.remaining) == (
        "write",
        1,
        15,
        14,
    )
    assert decision.resets_at is not None
    assert decision.resets_at.tzinfo is not None
    assert decision.resets_at.utcoffset() == UTC.utcoffset(None)
    assert decision.duplicate is False
    [seen] = quota_service.seen
    assert seen.authorization == f"Bearer {TOKEN}"
    assert seen.body == {
        "session_id": "s1",
        "tool": "delete_tag",
        "annotations": {"destructiveHint": True, "title": "Delete"},
        "principal": "alice",
        "call_id": "call-1",
        "lease": 2,  # before the service has classified a tool, any call may be a read
    }


async def test_a_block_is_a_value_with_the_service_message_and_is_never_retried(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.limits["write"] = 2
    client = make_client()
    for _ in range(2):
        assert (await client.check(WRITE)).allowed

    decision = await client.check(WRITE)

    assert decision.allowed is False
    assert decision.outcome is Outcome.QUOTA_EXCEEDED
    assert decision.error_code == "quota_exceeded"
    assert "was NOT run" in decision.message
    assert "(2/2 calls)" in decision.message
    assert decision.retry_after_seconds == 3600
    assert (decision.used, decision.limit, decision.remaining) == (2, 2, 0)
    assert len(quota_service.seen) == 3
    assert client.stats().refused == 1


async def test_503_is_retried_with_the_same_call_id_until_an_answer(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.script.extend([Scripted(503), Scripted(503)])
    client = make_client(max_attempts=3)

    decision = await client.check(WRITE)

    assert decision.allowed is True
    assert decision.attempts == 3
    call_ids = {body["call_id"] for body in quota_service.bodies()}
    assert len(quota_service.seen) == 3
    assert len(call_ids) == 1
    assert call_ids.pop().startswith("gen-")
    assert client.stats().retries == 2
    assert quota_service.used[("s1", "write")] == 1


async def test_503_until_the_last_attempt_refuses_a_write(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.script.extend([Scripted(503)] * 3)
    client = make_client(max_attempts=3)

    decision = await client.check(WRITE)

    assert decision.allowed is False
    assert decision.outcome is Outcome.FAIL_CLOSED
    assert decision.error_code == "quota_service_unavailable"
    assert "was NOT run" in decision.message
    assert len(quota_service.seen) == 3
    assert client.stats().fail_closed == {"write": 1}


async def test_unreachable_service_lets_reads_run_and_logs_and_counts_each_one(
    dead_url: str, make_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(base_url=dead_url, max_attempts=2)

    with caplog.at_level(logging.WARNING, logger="mcp_quota_client"):
        first = await client.check(READ)
        second = await client.check(READ)
        write = await client.check(WRITE)

    assert (first.allowed, first.outcome) == (True, Outcome.FAIL_OPEN)
    assert second.allowed is True
    assert first.attempts == 2
    assert (write.allowed, write.outcome) == (False, Outcome.FAIL_CLOSED)
    assert client.stats().fail_open == {"read": 2}
    assert client.stats().fail_open_total == 2
    fail_open_logs = [r for r in caplog.records if "FAIL-OPEN" in r.getMessage()]
    assert len(fail_open_logs) == 2
    assert all(r.levelno == logging.WARNING for r in fail_open_logs)
    assert "search_articles" in fail_open_logs[0].getMessage()


async def test_fail_modes_are_configurable_per_category(
    dead_url: str, make_client: ClientFactory
) -> None:
    client = make_client(
        base_url=dead_url,
        max_attempts=1,
        fail_modes={"read": FailMode.CLOSED, "write": FailMode.OPEN},
    )

    assert (await client.check(READ)).allowed is False
    assert (await client.check(WRITE)).allowed is True
    unknown = CheckRequest(session_id="s1", tool="rotate_keys", category="admin")
    assert (await client.check(unknown)).outcome is Outcome.FAIL_CLOSED


async def test_any_5xx_is_retried_then_follows_the_fail_mode(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.script.extend([Scripted(500), Scripted(502), Scripted(500)] * 2)
    client = make_client(max_attempts=3)

    write = await client.check(WRITE)
    read = await client.check(READ)

    assert write.outcome is Outcome.FAIL_CLOSED
    assert write.http_status == 500
    assert read.outcome is Outcome.FAIL_OPEN
    assert len(quota_service.seen) == 6  # three tries each, within the deadline


async def test_a_rejected_check_refuses_even_reads_and_is_not_retried(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    client = make_client(token="wrong-token", max_attempts=3)

    decision = await client.check(READ)

    assert decision.allowed is False
    assert decision.outcome is Outcome.REJECTED
    assert decision.http_status == 401
    assert "configuration problem" in decision.message
    assert len(quota_service.seen) == 1
    assert client.stats().rejected == 1
    assert client.stats().fail_open_total == 0


async def test_a_400_names_the_field(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.script.append(
        Scripted(
            400,
            {"error": {"code": "invalid_request", "message": "bad charset", "field": "tool"}},
        )
    )
    client = make_client()

    decision = await client.check(WRITE)

    assert decision.outcome is Outcome.REJECTED
    assert "field 'tool'" in decision.message
    assert "bad charset" in decision.message


async def test_a_timed_out_check_is_retried_without_being_counted_twice(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.script.append(Scripted(hang=True))
    client = make_client(read_timeout=0.3, max_attempts=2)

    decision = await client.check(WRITE)

    assert decision.allowed is True
    assert decision.duplicate is True
    assert decision.used == 1
    assert decision.attempts == 2
    assert len({body["call_id"] for body in quota_service.bodies()}) == 1
    assert quota_service.used[("s1", "write")] == 1
    following = await client.check(WRITE)
    assert (following.used, following.duplicate) == (2, False)


async def test_backoff_is_jittered_exponential_and_capped(quota_service: FakeQuotaService) -> None:
    quota_service.script.extend([Scripted(503)] * 4)
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)

    config = QuotaClientConfig(
        base_url=quota_service.url,
        token=TOKEN,
        max_attempts=5,
        backoff_base=0.1,
        backoff_max=0.3,
    )
    async with QuotaClient(config, jitter=lambda: 0.5, sleep=record) as client:
        decision = await client.check(WRITE)

    assert decision.allowed is True
    assert delays == pytest.approx([0.05, 0.1, 0.15, 0.15])


async def test_an_unreadable_answer_is_a_fault_not_a_decision(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.script.extend([Scripted(200, {"unexpected": True})] * 2)
    client = make_client()

    assert (await client.check(WRITE)).outcome is Outcome.FAIL_CLOSED
    assert (await client.check(READ)).outcome is Outcome.FAIL_OPEN


async def test_checks_share_one_pooled_connection(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    client = make_client()

    for _ in range(5):
        await client.check(READ)

    assert len({entry.client_port for entry in quota_service.seen}) == 1


def test_config_from_env_reads_url_token_and_fail_mode_overrides() -> None:
    config = QuotaClientConfig.from_env(
        {
            "MCP_QUOTA_URL": "http://quota.local",
            "MCP_QUOTA_TOKEN": "t",
            "MCP_QUOTA_FAIL_CLOSED": "read",
            "MCP_QUOTA_FAIL_OPEN": "telemetry, logs",
            "MCP_QUOTA_READ_TIMEOUT": "0.5",
        }
    )

    assert config.read_timeout == 0.5
    assert config.fail_mode_for("read") is FailMode.CLOSED
    assert config.fail_mode_for("write") is FailMode.CLOSED
    assert config.fail_mode_for("logs") is FailMode.OPEN
    assert config.fail_mode_for("anything-else") is FailMode.CLOSED
    with pytest.raises(ValueError, match="MCP_QUOTA_TOKEN"):
        QuotaClientConfig.from_env({"MCP_QUOTA_URL": "http://quota.local"})


def test_importing_the_client_pulls_in_no_framework_and_no_aws() -> None:
    probe = (
        "import sys, mcp_quota_client; "
        "print(sorted({'chalice', 'boto3', 'botocore', 'fastmcp', 'mcp'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


async def test_a_wrong_token_says_which_setting_to_fix(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    client = make_client(token="not-the-token")  # the stub answers 401, as for no token

    decision = await client.check(WRITE)

    assert decision.outcome is Outcome.REJECTED
    assert (
        "the quota service got no usable token from this server (401): check MCP_QUOTA_TOKEN"
        in decision.message
    )
    assert "no detail" not in decision.message
    assert "was NOT run" in decision.message


APPROVAL = {"id": "ap_1", "expires_at": "2026-12-02T12:15:00Z", "console_url": "http://q/c#/a/ap_1"}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (
            {"error": {"code": "approval_required", "message": "Ask."}, "approval": APPROVAL},
            "approval required for tool 'delete_tag' in session 's1': approve ap_1 at "
            + APPROVAL["console_url"],
        ),
        (
            {"error": {"code": "approval_denied", "message": "Denied: no."}},
            "approval denied for tool 'delete_tag' in session 's1': Denied: no.",
        ),
    ],
)
async def test_an_approval_refusal_is_logged_as_one_not_as_a_rejected_check(
    quota_service: FakeQuotaService,
    make_client: ClientFactory,
    caplog: pytest.LogCaptureFixture,
    body: dict[str, object],
    says: str,
) -> None:
    """Defect class: a call waiting for a person's approval was logged at ERROR as
    "check rejected (403)", as a wrong token is, sending the operator to the
    configuration instead of to the console URL that approves it."""
    quota_service.script.append(Scripted(403, body))
    client = make_client()

    with caplog.at_level(logging.INFO, logger="mcp_quota_client"):
        decision = await client.check(WRITE)

    assert decision.allowed is False
    logged = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert logged == [(logging.WARNING, f"mcp-quota: {says}")], logged
    assert (client.stats().refused, client.stats().rejected) == (1, 0)
