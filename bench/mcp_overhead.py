"""What the quota middleware adds to an MCP tool call, end to end over loopback HTTP.

The quota service runs as `make run` runs it (here on dynalite); the example articles
server runs twice, with and without the middleware; a fastmcp client calls the read-only
`search_articles` tool on each in turn, in fresh sessions that stay under the read limit.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
from fastmcp import Client
from mcp_quota_client import META_SESSION_KEY, QuotaClient, QuotaClientConfig
from mcp_quota_client.decision import CheckRequest
from mcp_quota_client.fastmcp import QuotaMiddleware
from mcp_quota_client.session import CallerInfo

from tests.support import free_port, running_service, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
# dynalite has no SNS: without a topic given, serve_local.py would try to create one there.
NO_TOPIC = "arn:aws:sns:us-east-1:000000000000:mcp-quota-bench-none"


def dynalite_env(endpoint: str) -> dict[str, str]:
    """`make run` pointed at dynalite."""
    return {"AWS_ENDPOINT_URL": endpoint, "QUOTA_TOPIC_ARN": NO_TOPIC}


@contextmanager
def articles_server(quota_url: str | None) -> Iterator[str]:
    """The example server on a free port; with the middleware when quota_url is given."""
    port = free_port()
    command = [sys.executable, str(ROOT / "bench" / "mcp_server.py"), "--port", str(port)]
    env = dict(os.environ)
    if quota_url is None:
        command.append("--no-quota")
    else:
        env.update({"MCP_QUOTA_URL": quota_url, "MCP_QUOTA_TOKEN": "dev-server-token"})
        # One check per call, as before leases: what a check costs. bench/leases.py
        # measures leased reads, on and off.
        env["MCP_QUOTA_LEASE"] = "off"
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
        try:
            wait_for_port(port, timeout=60)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


async def _calls(url: str, calls: int, warmup: int) -> list[float]:
    samples: list[float] = []
    async with Client(url) as client:
        meta: dict[str, Any] = {}
        for i in range(warmup + calls):
            if i % 150 == 0:
                meta = {META_SESSION_KEY: f"bench-{uuid.uuid4().hex}"}
            start = time.perf_counter()
            result = await client.call_tool_mcp("search_articles", {"query": "ai"}, meta=meta)
            elapsed = (time.perf_counter() - start) * 1000
            if result.is_error:
                raise RuntimeError(f"tool call refused or failed: {result.content}")
            if i >= warmup:
                samples.append(elapsed)
    return samples


def _direct_checks(quota_url: str, calls: int) -> list[float]:
    """`POST /v1/check` straight at the service, for comparison: what one check costs."""
    samples: list[float] = []
    headers = {"Authorization": "Bearer dev-server-token", "Content-Type": "application/json"}
    with httpx2.Client(base_url=quota_url, headers=headers) as http:
        for i in range(calls):
            body = {"session_id": f"direct-{i // 150}-{uuid.uuid4().hex[:6]}", "tool": "get_x"}
            start = time.perf_counter()
            http.post("/v1/check", json={**body, "annotations": {"readOnlyHint": True}})
            samples.append((time.perf_counter() - start) * 1000)
    return samples


async def _client_checks(quota_url: str, calls: int) -> list[float]:
    """The same checks through `QuotaClient` (the middleware's own async HTTP client, one
    pooled connection), straight to the service: the round trip the middleware must make."""
    samples: list[float] = []
    config = QuotaClientConfig(base_url=quota_url, token="dev-server-token", lease=False)
    async with QuotaClient(config) as client:
        for i in range(calls):
            request = CheckRequest(
                session_id=f"client-{i // 150}-{uuid.uuid4().hex[:6]}",
                tool="get_x",
                annotations={"readOnlyHint": True},
            )
            start = time.perf_counter()
            decision = await client.check(request)
            samples.append((time.perf_counter() - start) * 1000)
            if not decision.allowed:
                raise RuntimeError(f"check refused: {decision}")
    return samples


async def _guard_cpu(calls: int = 2000) -> float:
    """Microseconds of the middleware's own work per call: its guard deciding against an
    in-memory transport that answers at once (no network, no service)."""
    answer = {
        "allowed": True,
        "session_id": "s",
        "tool": "search_articles",
        "category": "read",
        "used": 1,
        "limit": 200,
        "remaining": 199,
        "resets_at": "2026-12-03T18:00:00Z",
        "duplicate": False,
    }
    transport = httpx2.MockTransport(lambda _: httpx2.Response(200, json=answer))
    config = QuotaClientConfig(base_url="http://quota", token="t", lease=False)
    guard = QuotaMiddleware(QuotaClient(config, transport=transport)).guard
    caller = CallerInfo(meta={META_SESSION_KEY: "bench"}, server_name="articles")
    for _ in range(100):
        await guard.decide("search_articles", None, caller)
    start = time.process_time()
    for _ in range(calls):
        await guard.decide("search_articles", None, caller)
    return (time.process_time() - start) / calls * 1e6


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "calls": len(ordered),
        "median_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
    }


def measure(dynalite: str, calls: int = 300, warmup: int = 20) -> dict[str, Any]:
    """Median and p99 per tool call, with and without the middleware, and the difference."""
    with (
        running_service(dynalite_env(dynalite)) as quota,
        articles_server(quota) as guarded,
        articles_server(None) as bare,
    ):
        without = _summary(asyncio.run(_calls(bare, calls, warmup)))
        with_quota = _summary(asyncio.run(_calls(guarded, calls, warmup)))
        direct = _summary(_direct_checks(quota, calls))
        through_client = _summary(asyncio.run(_client_checks(quota, calls)))
    return {
        "without": without,
        "with": with_quota,
        "direct_check": direct,
        "client_check": through_client,
        "guard_cpu_us": round(asyncio.run(_guard_cpu()), 1),
        "added_median_ms": round(with_quota["median_ms"] - without["median_ms"], 3),
        "added_p99_ms": round(with_quota["p99_ms"] - without["p99_ms"], 3),
        "quota_backend": "dynalite via scripts/serve_local.py (chalice local)",
    }
