"""What `mcp-quota-proxy` adds to a tool call, beside what the in-process middleware adds.

The quota service runs as `make run` runs it (on dynalite). All pairs are measured in
one interleaved loop, so each pair and the check see the same load. The upstream is the
TypeScript tags server (official TypeScript SDK); a fastmcp client calls its read-only
`list_deletions` tool directly and through the proxy, over HTTP and over stdio. The
middleware's figure is `bench/mcp_overhead.py`'s pair: the example articles server with
and without `QuotaMiddleware`. Leases are off everywhere, so every call pays one check;
that check, straight from `QuotaClient`, is printed too. Target (issue 23): the proxy
adds at most one check plus 2 ms.

    .venv/bin/python -m bench.proxy_overhead [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

from fastmcp import Client
from fastmcp.client.transports import ClientTransport, StdioTransport
from mcp_quota_client import META_SESSION_KEY, QuotaClient, QuotaClientConfig
from mcp_quota_client.decision import CheckRequest

from bench import mcp_overhead
from tests.support import dynalite_server, running_service

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from launch import wait_healthy  # noqa: E402 - examples/ is on the path from here

from tests.mcp.proxy_support import (  # noqa: E402
    spawn_proxy,
    spawn_tags_http,
    tags_command,
)

SESSION_CALLS = 150  # a fresh session before the default read budget (200) runs out
LEASE_OFF = {"MCP_QUOTA_LEASE": "off"}


Target = str | ClientTransport


async def _interleaved(
    pairs: dict[str, tuple[Target, Target, str, dict[str, Any]]],
    quota_url: str,
    calls: int,
    warmup: int,
) -> dict[str, list[float]]:
    """Milliseconds per call for every target, and per check straight from QuotaClient,
    taken in turn in one loop: the machine is shared, and a figure taken a minute after
    its baseline measures the neighbours as much as the proxy.

    `pairs` maps a label to (direct target, target with the quota, tool, arguments);
    the samples come back under `<label>.direct` and `<label>.quota`, and `check`.
    """
    samples: dict[str, list[float]] = {"check": []}
    config = QuotaClientConfig(base_url=quota_url, token="dev-server-token", lease=False)
    async with AsyncExitStack() as stack:
        quota = await stack.enter_async_context(QuotaClient(config))
        clients: dict[str, tuple[Client[Any], str, dict[str, Any]]] = {}
        for label, (direct, guarded, tool, arguments) in pairs.items():
            for side, target in (("direct", direct), ("quota", guarded)):
                client = await stack.enter_async_context(Client(target))
                clients[f"{label}.{side}"] = (client, tool, arguments)
                samples[f"{label}.{side}"] = []
        run = uuid.uuid4().hex[:8]
        for i in range(warmup + calls):
            for key, (client, tool, arguments) in clients.items():
                # One session per target and block of calls: each stays under budget.
                meta = {META_SESSION_KEY: f"bench-{run}-{key}-{i // SESSION_CALLS}"}
                start = time.perf_counter()
                result = await client.call_tool_mcp(tool, arguments, meta=meta)
                elapsed = (time.perf_counter() - start) * 1000
                if result.is_error:
                    raise RuntimeError(f"{key}: {tool} refused or failed: {result.content}")
                if i >= warmup:
                    samples[key].append(elapsed)
            request = CheckRequest(
                session_id=f"check-{i // SESSION_CALLS}-{uuid.uuid4().hex[:6]}",
                tool="get_x",
                annotations={"readOnlyHint": True},
            )
            start = time.perf_counter()
            decision = await quota.check(request)
            if i >= warmup:
                samples["check"].append((time.perf_counter() - start) * 1000)
            if not decision.allowed:
                raise RuntimeError(f"check refused: {decision}")
    return samples


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))], 3)

    return {"calls": len(ordered), "p50_ms": at(0.5), "p90_ms": at(0.9)}


def _added(through: dict[str, float], direct: dict[str, float]) -> dict[str, float]:
    return {
        "p50_ms": round(through["p50_ms"] - direct["p50_ms"], 3),
        "p90_ms": round(through["p90_ms"] - direct["p90_ms"], 3),
    }


def _stdio_upstream(record: Path) -> StdioTransport:
    command, *args = tags_command(record)
    return StdioTransport(command, args, keep_alive=False)


def _stdio_proxy(record: Path, quota_url: str) -> StdioTransport:
    env = {**os.environ, **LEASE_OFF, "MCP_QUOTA_URL": quota_url}
    env["MCP_QUOTA_TOKEN"] = "dev-server-token"
    args = ["-m", "mcp_quota_client.proxy", "--stdio"]
    args += ["--upstream-command", shlex.join(tags_command(record))]
    return StdioTransport(sys.executable, args, env=env, cwd=str(ROOT), keep_alive=False)


def measure(dynalite: str, calls: int = 200, warmup: int = 20) -> dict[str, Any]:
    """p50 and p90 per tool call: upstream direct, through the proxy, and the difference,
    over HTTP and over stdio; the middleware's difference and one check beside them."""
    tool = "list_deletions"
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        logs = Path(tmp)
        record = logs / "deletions.jsonl"
        quota = stack.enter_context(running_service(mcp_overhead.dynalite_env(dynalite)))
        tags = spawn_tags_http(record, logs)
        stack.callback(tags.stop)
        upstream = ["--upstream-url", f"{tags.url}/mcp"]
        proxy = spawn_proxy(upstream, quota, "dev-server-token", logs, env=LEASE_OFF)
        stack.callback(proxy.stop)
        for running in (tags, proxy):
            wait_healthy(running, timeout=120)

        guarded = stack.enter_context(mcp_overhead.articles_server(quota))
        bare = stack.enter_context(mcp_overhead.articles_server(None))
        search = ("search_articles", {"query": "ai"})
        taken = asyncio.run(
            _interleaved(
                {
                    "http": (f"{tags.url}/mcp", f"{proxy.url}/mcp", tool, {}),
                    "stdio": (_stdio_upstream(record), _stdio_proxy(record, quota), tool, {}),
                    "middleware": (bare, guarded, *search),
                },
                quota,
                calls,
                warmup,
            )
        )
    summary = {key: _percentiles(values) for key, values in taken.items()}
    http_direct, http_proxy = summary["http.direct"], summary["http.quota"]
    stdio_direct, stdio_proxy = summary["stdio.direct"], summary["stdio.quota"]
    bare_calls, guarded_calls = summary["middleware.direct"], summary["middleware.quota"]
    check = summary["check"]
    proxy_http_added = _added(http_proxy, http_direct)
    return {
        "upstream": "tests/mcp/servers/tags_server.mjs (TypeScript SDK), tool list_deletions",
        "http": {"direct": http_direct, "proxy": http_proxy, "added": proxy_http_added},
        "stdio": {
            "direct": stdio_direct,
            "proxy": stdio_proxy,
            "added": _added(stdio_proxy, stdio_direct),
        },
        "middleware": {
            "direct": bare_calls,
            "guarded": guarded_calls,
            "added": _added(guarded_calls, bare_calls),
        },
        "check": check,
        "target_p50_ms": round(check["p50_ms"] + 2.0, 3),
        "within_target": proxy_http_added["p50_ms"] <= check["p50_ms"] + 2.0,
    }


def table(r: dict[str, Any]) -> list[str]:
    """The markdown rows of the proxy's section in `bench/RESULTS.md`."""
    rows = [
        "",
        "## mcp-quota-proxy per tool call, beside the middleware (bench/proxy_overhead.py)",
        "",
        f"Upstream: {r['upstream']}; leases off, so every call pays one check.",
        "",
        "| per tool call | direct p50 / p90 ms | with quota p50 / p90 ms | added p50 / p90 ms |",
        "|---|---|---|---|",
    ]
    for label, key, through in (
        ("proxy, HTTP upstream", "http", "proxy"),
        ("proxy (served over stdio), stdio upstream", "stdio", "proxy"),
        ("middleware in the server (articles example)", "middleware", "guarded"),
    ):
        d, t, a = r[key]["direct"], r[key][through], r[key]["added"]
        rows.append(
            f"| {label} | {d['p50_ms']:.2f} / {d['p90_ms']:.2f} | {t['p50_ms']:.2f} / "
            f"{t['p90_ms']:.2f} | {a['p50_ms']:.2f} / {a['p90_ms']:.2f} |"
        )
    c = r["check"]
    rows += [
        "",
        f"One check from QuotaClient: {c['p50_ms']:.2f} / {c['p90_ms']:.2f} ms (p50 / p90). "
        f"Target: the proxy adds at most one check + 2 ms = {r['target_p50_ms']:.2f} ms at p50: "
        f"{'met' if r['within_target'] else 'NOT met'} over HTTP.",
    ]
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    start = time.monotonic()
    with dynalite_server() as dynalite:
        result = measure(dynalite, calls=args.calls)
    print(json.dumps(result, indent=2) if args.json else "\n".join(table(result)))
    print(f"({time.monotonic() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
