"""Leased reads: 200 read tool calls through the FastMCP middleware, leases on and off.

The quota service runs as `make run` runs it (on dynalite) and is asked over loopback
HTTP; the example articles server runs in process, bare and with the middleware (leases
on, then off), and a fastmcp client calls the read-only `search_articles` tool 200 times
in a fresh session, in several runs. It reports the requests the service received and the
latency each call adds over the bare server (p50, p90), and the share of calls answered
from a lease.

    .venv/bin/python bench/leases.py   # standalone: starts its own dynalite
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
from fastmcp import Client, FastMCP

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "examples"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from articles_server import build_server  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from mcp_quota_client import META_SESSION_KEY, QuotaClient, QuotaClientConfig  # noqa: E402
from mcp_quota_client.fastmcp import QuotaMiddleware  # noqa: E402

from bench.mcp_overhead import dynalite_env  # noqa: E402
from tests.support import dynalite_server, running_service  # noqa: E402

CALLS = 200


class CountingTransport(httpx2.AsyncBaseTransport):
    """Loopback HTTP that counts the requests the quota service receives, by path."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.requests: dict[str, int] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        self.requests[path] = self.requests.get(path, 0) + 1
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _server(
    quota_url: str | None, lease: bool, transport: CountingTransport
) -> tuple[FastMCP, QuotaClient]:
    config = QuotaClientConfig(
        base_url=quota_url or "http://127.0.0.1:9", token="dev-server-token", lease=lease
    )
    quota = QuotaClient(config, transport=transport)
    server = build_server(quota)
    if quota_url is None:
        server.middleware = [m for m in server.middleware if not isinstance(m, QuotaMiddleware)]
    return server, quota


async def _run(built: tuple[FastMCP, QuotaClient], calls: int) -> list[float]:
    server, quota = built
    samples: list[float] = []
    meta = {META_SESSION_KEY: f"lease-bench-{uuid.uuid4().hex}"}
    async with Client(server) as client:
        await client.call_tool_mcp("search_articles", {"query": "warm"}, meta={})  # warm-up
        for _ in range(calls):
            start = time.perf_counter()
            result = await client.call_tool_mcp("search_articles", {"query": "ai"}, meta=meta)
            samples.append((time.perf_counter() - start) * 1000)
            if result.is_error:
                raise RuntimeError(f"tool call refused or failed: {result.content}")
    await quota.aclose()  # unspent leased calls go back (not timed)
    return samples


def _percentile(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


async def _measure(quota_url: str, calls: int, runs: int) -> dict[str, Any]:
    bare = CountingTransport()
    baseline: list[float] = []
    for _ in range(runs):
        baseline += await _run(_server(None, False, bare), calls)
    out: dict[str, Any] = {
        "calls_per_run": calls,
        "runs": runs,
        "bare": {
            "p50_ms": round(statistics.median(baseline), 3),
            "p90_ms": round(_percentile(baseline, 0.9), 3),
        },
    }
    for label, lease in (("leases_on", True), ("leases_off", False)):
        transport = CountingTransport()
        samples: list[float] = []
        for _ in range(runs):
            samples += await _run(_server(quota_url, lease, transport), calls)
        # The warm-up call of each run is a check too (another session): not counted.
        checks = transport.requests.get("/v1/check", 0) - runs
        out[label] = {
            "service_requests_per_200": round(checks / runs * 200 / calls, 1),
            "p50_ms": round(statistics.median(samples), 3),
            "p90_ms": round(_percentile(samples, 0.9), 3),
            "added_p50_ms": round(statistics.median(samples) - statistics.median(baseline), 3),
            "added_p90_ms": round(_percentile(samples, 0.9) - _percentile(baseline, 0.9), 3),
            "calls_without_a_request": round(1 - checks / (runs * calls), 3),
            "lease_returns": transport.requests.get("/v1/leases/return", 0),
        }
    return out


def measure(dynalite: str, calls: int = CALLS, runs: int = 3) -> dict[str, Any]:
    """Requests and added latency of 200 reads, leases on and off, against `make run`."""
    with running_service(dynalite_env(dynalite)) as quota:
        result = asyncio.run(_measure(quota, calls, runs))
    result["quota_backend"] = "dynalite via scripts/serve_local.py (chalice local), loopback HTTP"
    return result


def table(r: dict[str, Any]) -> list[str]:
    """The markdown rows of `bench/RESULTS.md`."""
    lines = [
        "",
        f"## Leased reads: {r['calls_per_run']} read tool calls through the FastMCP "
        f"middleware, {r['runs']} runs (bench/leases.py)",
        "",
        "| | service requests per 200 calls | calls with no request | added p50 ms | "
        "added p90 ms |",
        "|---|---|---|---|---|",
    ]
    for label, name in (("leases_on", "leases on"), ("leases_off", "leases off")):
        row = r[label]
        lines.append(
            f"| {name} | {row['service_requests_per_200']} | "
            f"{row['calls_without_a_request']:.0%} | {row['added_p50_ms']:.2f} | "
            f"{row['added_p90_ms']:.2f} |"
        )
    lines.append(
        f"Bare server (no middleware): p50 {r['bare']['p50_ms']:.2f} ms, "
        f"p90 {r['bare']['p90_ms']:.2f} ms. Quota service: {r['quota_backend']}."
    )
    return lines


def main() -> int:
    with dynalite_server() as dynalite:
        result = measure(dynalite)
    print(json.dumps(result, indent=2))
    print("\n".join(table(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
