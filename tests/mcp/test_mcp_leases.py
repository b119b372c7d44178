"""Leased reads end to end in process: a real FastMCP server and client, the middleware,
and the real quota service (Chalice's test client over the memory backend) behind an
HTTP transport that counts every request the service receives."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2
import mcp_types as mt
import pytest
from articles_library import Library
from articles_server import build_server
from articles_server_sdk import build_server as build_sdk_server
from fastmcp import Client
from mcp import Client as SdkClient
from mcp_quota_client import META_DECISION_KEY, META_SESSION_KEY, QuotaClient, QuotaClientConfig
from mcp_types import RequestParamsMeta

from tests.api.conftest import Api, body, running_api
from tests.support import FixedClock

pytestmark = pytest.mark.anyio

LEASE_MAX = 10  # the default policy's read lease
LEASE_SECONDS = 30


@dataclass
class Quota:
    """The real service in process, and the requests it received (method and path)."""

    api: Api
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def transport(self) -> httpx2.MockTransport:
        def handle(request: httpx2.Request) -> httpx2.Response:
            payload = request.content
            self.requests.append((request.url.path, httpx2.Response(200, content=payload).json()))
            headers = {
                "Authorization": request.headers["authorization"],
                "Content-Type": "application/json",
            }
            answer = self.api.client.http.request(
                request.method, request.url.path, headers=headers, body=payload
            )
            return httpx2.Response(
                answer.status_code, headers=dict(answer.headers), content=answer.body
            )

        return httpx2.MockTransport(handle)

    def checks(self) -> list[dict[str, Any]]:
        return [sent for path, sent in self.requests if path == "/v1/check"]

    def session(self, session_id: str) -> dict[str, Any]:
        view: dict[str, Any] = body(self.api.get(f"/v1/sessions/{session_id}"))
        return view


class ManualClock:
    """The client's clock, moved by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def quota() -> Iterator[Quota]:
    with running_api(FixedClock(), "memory") as api:
        yield Quota(api)


@pytest.fixture
def client_clock() -> ManualClock:
    return ManualClock()


def quota_client(quota: Quota, clock: ManualClock, **options: Any) -> QuotaClient:
    config = QuotaClientConfig(base_url="http://quota.test", token="dev-server-token", **options)
    return QuotaClient(config, transport=quota.transport(), clock=clock)


async def search(client: Client[Any], session: str) -> mt.CallToolResult:
    return await client.call_tool_mcp(
        "search_articles", {"query": "ai"}, meta={META_SESSION_KEY: session}
    )


async def test_200_reads_reach_the_service_at_most_25_times(
    quota: Quota, client_clock: ManualClock
) -> None:
    library = Library()
    quota_client_ = quota_client(quota, client_clock)
    server = build_server(quota_client_, library)

    async with Client(server) as client:
        results = [await search(client, "reader") for _ in range(200)]
        refused = await search(client, "reader")

    assert not any(result.is_error for result in results)
    assert library.searches == 200
    assert len(quota.checks()) <= 25
    assert [check["lease"] for check in quota.checks()[:4]] == [2, 4, 8, 10]
    assert refused.is_error is True
    view = quota.session("reader")["categories"]["read"]
    assert (view["used"], view["leased"]) == (200, 200)
    metas = [result.meta[META_DECISION_KEY] for result in results if result.meta]
    assert sum(meta["fromLease"] for meta in metas) == 200 - (len(quota.checks()) - 1)
    assert quota_client_.stats().leased == 200 - (len(quota.checks()) - 1)


async def test_writes_keep_one_check_per_call(quota: Quota, client_clock: ManualClock) -> None:
    server = build_server(quota_client(quota, client_clock))

    async with Client(server) as client:
        for i in range(8):
            result = await client.call_tool_mcp(
                "delete_tag", {"tag": f"t{i}"}, meta={META_SESSION_KEY: "writer"}
            )
            assert result.is_error is False

    checks = quota.checks()
    assert len(checks) == 8
    assert "lease" in checks[0]  # the tool was not classified yet
    assert not any("lease" in check for check in checks[1:])
    assert quota.session("writer")["categories"]["write"]["used"] == 8


async def test_a_suspension_reaches_a_leasing_client_within_one_lease(
    quota: Quota, client_clock: ManualClock
) -> None:
    library = Library()
    server = build_server(quota_client(quota, client_clock), library)

    async with Client(server) as client:
        for _ in range(20):
            assert (await search(client, "runaway")).is_error is False
        suspended = quota.api.admin("/v1/sessions/runaway/suspend", {"reason": "runaway"})
        assert suspended.status_code == 200
        after = 0
        while not (await search(client, "runaway")).is_error:
            after += 1
            assert after < LEASE_MAX
        again = await search(client, "runaway")

    # 2 + 4 + 8 calls, then a lease of 10 of which 6 were spent: 4 left when suspended
    assert after == 4
    assert again.is_error and again.structured_content is not None
    assert again.structured_content["kind"] == "session_suspended"
    assert library.searches == 24


async def test_a_suspension_reaches_a_leasing_client_within_lease_seconds(
    quota: Quota, client_clock: ManualClock
) -> None:
    server = build_server(quota_client(quota, client_clock))

    async with Client(server) as client:
        for _ in range(3):
            await search(client, "slow")  # a lease of 4 granted, 1 of it spent
        quota.api.admin("/v1/sessions/slow/suspend", {"reason": "stop"})
        client_clock.now += LEASE_SECONDS
        refused = await search(client, "slow")

    assert refused.is_error is True


async def test_closing_the_client_gives_unspent_calls_back(
    quota: Quota, client_clock: ManualClock
) -> None:
    quota_client_ = quota_client(quota, client_clock)
    server = build_server(quota_client_)

    async with Client(server) as client:
        for _ in range(15):
            await search(client, "closing")
    assert quota.session("closing")["categories"]["read"]["used"] == 24  # 2 + 4 + 8 + 10
    await quota_client_.aclose()

    view = quota.session("closing")["categories"]["read"]
    assert (view["used"], view["leased"]) == (15, 15)
    assert quota_client_.stats().lease_returned == 9
    assert quota.requests[-1][0] == "/v1/leases/return"


async def test_an_idle_lease_goes_back_at_the_next_call(
    quota: Quota, client_clock: ManualClock
) -> None:
    server = build_server(quota_client(quota, client_clock, lease_idle_seconds=5))

    async with Client(server) as client:
        await search(client, "idle")  # a lease of 2: 1 left
        assert quota.session("idle")["categories"]["read"]["used"] == 2
        client_clock.now += 6
        await search(client, "other")
        for _ in range(3):  # the return runs in the background: let it finish
            if quota.session("idle")["categories"]["read"]["used"] == 1:
                break
            await search(client, "other")

    assert quota.session("idle")["categories"]["read"]["used"] == 1


async def test_leases_off_is_one_check_per_call(quota: Quota, client_clock: ManualClock) -> None:
    server = build_server(quota_client(quota, client_clock, lease=False))

    async with Client(server) as client:
        for _ in range(12):
            await search(client, "plain")

    assert len(quota.checks()) == 12
    assert not any("lease" in check for check in quota.checks())


def test_the_environment_can_turn_leases_off() -> None:
    env = {"MCP_QUOTA_URL": "http://q", "MCP_QUOTA_TOKEN": "t"}
    assert QuotaClientConfig.from_env(env).lease is True
    assert QuotaClientConfig.from_env({**env, "MCP_QUOTA_LEASE": "off"}).lease is False
    config = QuotaClientConfig.from_env({**env, "MCP_QUOTA_LEASE_IDLE_SECONDS": "7.5"})
    assert config.lease_idle_seconds == 7.5


async def test_the_sdk_guard_leases_reads_too(quota: Quota, client_clock: ManualClock) -> None:
    library = Library()
    server = build_sdk_server(quota_client(quota, client_clock), library)
    meta = cast(RequestParamsMeta, {META_SESSION_KEY: "sdk-reader"})

    async with SdkClient(server) as client:
        for _ in range(30):
            result = await client.call_tool("search_articles", {"query": "ai"}, meta=meta)
            assert result.is_error is False

    assert library.searches == 30
    assert len(quota.checks()) == 5  # 2 + 4 + 8 + 10 + 10
    assert quota.session("sdk-reader")["categories"]["read"]["used"] == 34
