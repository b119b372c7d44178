"""The incident as a refusal storm (issue 22, item 4): one client makes 400 `delete_tag`
calls through the FastMCP middleware, in one session, against the service as `make run`
starts it on dynalite behind bench/latency_proxy.py (+5 ms on each store request).

Measured with the local refusal hold (the default) and without it, beside the naive
read-then-write counter on the same proxied store: service requests after the first
refusal, the p50 latency of a refused tool call, and after how many refusals the agent's
principal is suspended (escalation, `suspend_after_refusals` 50). Part of `make bench`.

    .venv/bin/python -m bench.refusal_storm
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
import urllib.parse
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
from fastmcp import Client
from mcp_quota_client import META_SESSION_KEY, QuotaClient, QuotaClientConfig

from bench import workloads
from bench.latency_proxy import latency_proxy
from bench.mcp_overhead import dynalite_env
from tests.e2e.http import ADMIN_TOKEN, call
from tests.support import dynalite_server, running_service

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from articles_library import Library  # type: ignore[import-not-found,unused-ignore]  # noqa: E402
from articles_server import build_server  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

CALLS = 400
DELAY_MS = 5
PRINCIPAL = "token:dev-server"  # the server token's own: the example server claims none


class CountingTransport(httpx2.AsyncBaseTransport):
    """The client's HTTP transport, counting the checks it sends."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self.sent: Counter[str] = Counter()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent[request.url.path] += 1
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _storm(quota_url: str, hold: bool) -> dict[str, Any]:
    transport = CountingTransport()
    config = QuotaClientConfig(
        base_url=quota_url, token="dev-server-token", hold_seconds=5.0 if hold else 0.0
    )
    quota = QuotaClient(config, transport=transport)
    meta = {META_SESSION_KEY: f"storm-{uuid.uuid4().hex[:10]}"}
    refused_ms: list[float] = []
    kinds: list[str] = []
    after_first_refusal = 0
    async with Client(build_server(quota, Library())) as client:
        for i in range(CALLS):
            before = transport.sent["/v1/check"]
            start = time.perf_counter()
            result = await client.call_tool_mcp("delete_tag", {"tag": f"t{i}"}, meta=meta)
            elapsed = (time.perf_counter() - start) * 1000
            if result.is_error:
                if kinds:
                    after_first_refusal += transport.sent["/v1/check"] - before
                refused_ms.append(elapsed)
                structured = result.structured_content or {}
                kinds.append(str(structured.get("kind")))
    await quota.aclose()
    suspended_at = next((n for n, k in enumerate(kinds) if k == "principal_suspended"), None)
    unsuspended = refused_ms[:suspended_at] if suspended_at is not None else refused_ms
    return {
        "calls": CALLS,
        "refused": len(kinds),
        "service_requests_after_first_refusal": after_first_refusal,
        "refused_p50_ms": round(statistics.median(refused_ms), 3),
        "refused_p50_before_suspension_ms": round(statistics.median(unsuspended), 3),
        "refusals_before_suspension": suspended_at,
        "refused_locally": quota.stats().refused_locally,
    }


def _resume(quota_url: str) -> None:
    """Resume the principal a storm suspended, so the next storm starts alike."""
    path = urllib.parse.quote(PRINCIPAL, safe="")
    call(f"{quota_url}/v1/principals/{path}/resume", "POST", {"reason": "bench"}, ADMIN_TOKEN)


def _naive(endpoint: str) -> dict[str, Any]:
    """The naive counter on the same proxied store: one GetItem per refused call (plus
    the tool server's round trip to it), and no escalation at all."""
    with workloads.backend("dynalite", endpoint) as b:
        naive = workloads.NaiveCounter(b.client, b.settings.counters_table)
        session = workloads.session_id()
        refused_ms: list[float] = []
        for _ in range(CALLS):
            start = time.perf_counter()
            allowed = naive.check(session, "write", workloads.WRITE_LIMIT)
            if not allowed:
                refused_ms.append((time.perf_counter() - start) * 1000)
    return {
        "calls": CALLS,
        "refused": len(refused_ms),
        "service_requests_after_first_refusal": len(refused_ms) - 1,
        "refused_p50_ms": round(statistics.median(refused_ms), 3),
        "refused_p50_before_suspension_ms": round(statistics.median(refused_ms), 3),
        "refusals_before_suspension": None,
        "note": "in-process, no HTTP hop: one store request per refused call",
    }


def measure(dynalite: str) -> dict[str, Any]:
    """The storm with the hold, without it, and on the naive counter."""
    with latency_proxy(dynalite, DELAY_MS) as endpoint:
        with running_service(dynalite_env(endpoint)) as quota:
            held = asyncio.run(_storm(quota, hold=True))
            _resume(quota)
            every = asyncio.run(_storm(quota, hold=False))
            _resume(quota)
        naive = _naive(endpoint)
    return {"delay_ms": DELAY_MS, "hold": held, "no_hold": every, "naive": naive}


def table(r: dict[str, Any]) -> list[str]:
    """The storm's figures as a Markdown section."""
    rows = [
        ("ours, local refusal hold", r["hold"]),
        ("ours, every call asked", r["no_hold"]),
        ("naive read-then-write", r["naive"]),
    ]
    lines = [
        "",
        f"## Refusal storm (issue 22): {CALLS} delete_tag calls, one client, FastMCP "
        f"middleware, +{r['delay_ms']} ms per store request",
        "",
        "| | refused | service requests after the first refusal (target <= 40) | "
        "p50 refused call ms (target < 1) | p50 before the suspension ms | "
        "suspended after refusals (policy: 50) |",
        "|---|---|---|---|---|---|",
    ]
    for label, row in rows:
        suspended = row["refusals_before_suspension"]
        lines.append(
            f"| {label} | {row['refused']} | {row['service_requests_after_first_refusal']} | "
            f"{row['refused_p50_ms']:.2f} | {row['refused_p50_before_suspension_ms']:.2f} | "
            f"{'never' if suspended is None else suspended} |"
        )
    lines += [
        "",
        "The naive counter runs in-process (no service hop): one store request per refused "
        "call, and it never suspends anyone. Once ours suspends the principal, its refusals "
        "cost no store request (the suspension is cached), hence the two p50 columns. With "
        "the hold, escalation is at most `hold_calls` (10) refusals late: the held ones are "
        "reported with the next check.",
    ]
    return lines


def main() -> None:
    with dynalite_server() as dynalite:
        result = measure(dynalite)
    print("\n".join(table(result)))


if __name__ == "__main__":
    main()
