"""`make demo`: replay the incident with the real pieces.

An agent loop calls the destructive `delete_tag` tool 400 times, as fast as it can,
through a real MCP client, against the example FastMCP server guarded by mcp-quota.
The quota service is started here as `make run` starts it (or, with MCP_QUOTA_URL
set, the one already running is used). At the end it prints what happened.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as mt
from fastmcp import Client

sys.path.insert(0, str(Path(__file__).resolve().parent))

from launch import ADMIN_TOKEN, articles_server, service_and_server
from mcp_quota_client import META_SESSION_KEY

STATS_URI = "stats://articles"


@contextmanager
def pieces(logs: Path) -> Iterator[tuple[str, Path | None, str]]:
    """Quota URL, its log (None if not ours) and the MCP URL.

    Uses the service at MCP_QUOTA_URL if set, else starts one as `make run` does.
    """
    existing = os.environ.get("MCP_QUOTA_URL")
    if existing:
        with articles_server(existing.rstrip("/"), logs) as server:
            yield existing.rstrip("/"), None, f"{server.url}/mcp"
        return
    with service_and_server(logs) as (service, server):
        yield service.url, service.log, f"{server.url}/mcp"


async def read_stats(client: Client[Any]) -> dict[str, int]:
    [contents] = await client.read_resource(STATS_URI)
    assert isinstance(contents, mt.TextResourceContents)
    loaded: dict[str, int] = json.loads(contents.text)
    return loaded


def text_of(result: mt.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, mt.TextContent))


async def agent_loop(mcp_url: str, session: str, calls: int) -> dict[str, Any]:
    """What a runaway agent does: call delete_tag in a tight loop, ignoring refusals."""
    meta = {META_SESSION_KEY: session}
    allowed = refused = 0
    first_refusal: mt.CallToolResult | None = None
    first_refused_at = 0
    async with Client(mcp_url) as client:
        before = await read_stats(client)
        started = time.perf_counter()
        for number in range(1, calls + 1):
            result = await client.call_tool_mcp("delete_tag", {"tag": f"tag-{number}"}, meta=meta)
            if result.is_error:
                refused += 1
                if first_refusal is None:
                    first_refusal, first_refused_at = result, number
            else:
                allowed += 1
        elapsed = time.perf_counter() - started
        after = await read_stats(client)
    return {
        "allowed": allowed,
        "refused": refused,
        "elapsed": elapsed,
        "deletions": after["deletions"] - before["deletions"],
        "first_refusal": first_refusal,
        "first_refused_at": first_refused_at,
    }


def _get(http: httpx2.Client, path: str, params: dict[str, str]) -> dict[str, Any] | str:
    try:
        response = http.get(path, params=params)
    except httpx2.TransportError as exc:
        return f"unreachable ({type(exc).__name__})"
    if response.status_code != 200:
        return f"not available on this service ({response.status_code})"
    body: dict[str, Any] = response.json()
    return body


def admin_view(base_url: str, session: str) -> list[str]:
    """What an administrator sees afterwards: the session and its audit trail."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx2.Client(base_url=base_url, headers=headers, timeout=5.0) as http:
        state = _get(http, f"/v1/sessions/{session}", {})
        audit = _get(http, "/v1/audit", {"session_id": session})
    lines = [f"The session, as an administrator sees it (GET /v1/sessions/{session}):"]
    if isinstance(state, str):
        lines.append(f"    {state}")
    else:
        lines.append(f"    state: {state.get('state')}, resets at {state.get('resets_at')}")
        for name, counts in sorted(state.get("categories", {}).items()):
            lines.append(
                f"    {name:<6} {counts.get('used')}/{counts.get('limit')} used, "
                f"{counts.get('refused')} refused"
            )
        lines.append(f"    last calls kept: {len(state.get('last_calls', []))}")
    lines += ["", "Its audit trail (GET /v1/audit):"]
    if isinstance(audit, str):
        lines.append(f"    {audit}")
    else:
        for event in audit.get("events", []):
            detail = event.get("detail", {})
            after = event.get("after") or {}
            if event.get("type") == "principal_suspended":
                summary = (
                    f"principal {after.get('principal')} suspended: "
                    f"{event.get('reason') or 'by an administrator'}"
                )
            else:
                summary = detail.get("subject") or (
                    f"{detail.get('tool')}: {detail.get('category')} "
                    f"{detail.get('used')}/{detail.get('limit')} ({detail.get('scope')} "
                    f"scope), {len(detail.get('last_calls', []))} last calls kept as evidence"
                )
            lines.append(f"    {event.get('at')}  {event.get('type'):<20} {summary}")
    return lines


def notification_from(log: Path | None) -> list[str]:
    """The e-mail the local stage prints on the service console, if this demo started it."""
    if log is None:
        return ["(The notification, if any, is printed on the quota service's console.)"]
    lines = log.read_text(errors="replace").splitlines()
    markers = [i for i, line in enumerate(lines) if "=== notification" in line]
    if not markers:
        return ["(No notification was printed by the service.)"]
    email: list[str] = []
    for marker in markers:
        for line in lines[marker + (1 if email else 0) :]:
            if line.startswith(("127.0.0.1 - -", "{", "Found ", "refused ", "admin ")):
                break
            if email and "=== notification" in line:
                break
            email.append("    " + line if line else "")
    heading = (
        f"The {len(markers)} e-mails sent for the whole loop: the exhaustion, then the "
        "principal's suspension once the loop kept ignoring refusals (printed by the local "
        "stage):"
        if len(markers) > 1
        else "The one e-mail sent for the whole loop (printed by the local stage):"
    )
    return [heading, *email]


def report(outcome: dict[str, Any], calls: int, session: str, where: dict[str, str]) -> str:
    refusal: mt.CallToolResult | None = outcome["first_refusal"]
    per_call_ms = 1000 * outcome["elapsed"] / calls
    lines = [
        "",
        f"mcp-quota demo: an agent loop called delete_tag {calls} times, as fast as it could.",
        f"  quota service:  {where['quota']} ({where['quota_note']})",
        f"  MCP server:     {where['mcp']} (examples/articles_server.py + QuotaMiddleware)",
        f"  quota session:  {session}  (sent as _meta['{META_SESSION_KEY}'])",
        "",
        f"  allowed:        {outcome['allowed']}",
        f"  refused:        {outcome['refused']}",
        f"  elapsed:        {outcome['elapsed']:.1f} s ({per_call_ms:.0f} ms per call)",
        f"  tags really deleted (server-side counter): {outcome['deletions']}",
        "",
    ]
    if refusal is None:
        lines.append("No call was refused: is the write limit above the number of calls?")
    else:
        lines += [
            f"What the agent saw from call {outcome['first_refused_at']} on "
            "(a tool result with isError: true, not a protocol error):",
            "",
            "    " + text_of(refusal),
            "",
            "    structuredContent: " + json.dumps(refusal.structured_content),
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args(argv)
    session = f"incident-{uuid.uuid4().hex[:8]}"
    logs = Path(tempfile.mkdtemp(prefix="mcp-quota-demo-"))
    print("Starting the quota service and the example MCP server...", flush=True)
    with pieces(logs) as (base_url, service_log, mcp_url):
        print(f"Replaying the incident: {args.calls} delete_tag calls...", flush=True)
        outcome = anyio.run(agent_loop, mcp_url, session, args.calls)
        note = f"started for this demo, log {service_log}" if service_log else "MCP_QUOTA_URL"
        where = {"quota": base_url, "quota_note": note, "mcp": mcp_url}
        print(report(outcome, args.calls, session, where))
        print()
        print("\n".join(admin_view(base_url, session)))
        print()
        print("\n".join(notification_from(service_log)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
