"""`make demo`: replay the incident with the real pieces.

An agent loop calls the destructive `delete_tag` tool 400 times, as fast as it can,
through a real MCP client, against the example FastMCP server guarded by mcp-quota.
The quota service is started here as `make run` starts it (or, with MCP_QUOTA_URL
set, the one already running is used). At the end it prints what happened.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import sys
import tempfile
import textwrap
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
    told: dict[str, tuple[int, mt.CallToolResult]] = {}
    async with Client(mcp_url) as client:
        before = await read_stats(client)
        started = time.perf_counter()
        for number in range(1, calls + 1):
            result = await client.call_tool_mcp("delete_tag", {"tag": f"tag-{number}"}, meta=meta)
            if result.is_error:
                refused += 1
                kind = str((result.structured_content or {}).get("kind"))
                told.setdefault(kind, (number, result))
            else:
                allowed += 1
        elapsed = time.perf_counter() - started
        after = await read_stats(client)
    return {
        "allowed": allowed,
        "refused": refused,
        "elapsed": elapsed,
        "deletions": after["deletions"] - before["deletions"],
        "told": told,
    }


def admin_view(base_url: str, session: str) -> list[str]:
    """The session's state and counters now, as an administrator's API call shows them."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with httpx2.Client(base_url=base_url, headers=headers, timeout=5.0) as http:
        try:
            response = http.get(f"/v1/sessions/{session}")
        except httpx2.TransportError as exc:
            return [f"  (the service could not be reached: {type(exc).__name__})"]
    if response.status_code != 200:
        return [f"  (not available on this service: {response.status_code})"]
    state: dict[str, Any] = response.json()
    counts = ", ".join(
        f"{name} {c.get('used')}/{c.get('limit')} ({c.get('refused')} refused)"
        for name, c in sorted(state.get("categories", {}).items())
    )
    return [f"  state {state.get('state')}: {counts}"]


def emails_from(log: Path | None) -> list[list[str]]:
    """The e-mails the local stage printed on the service's console, each as its lines."""
    if log is None:
        return []
    lines = log.read_text(errors="replace").splitlines()
    emails: list[list[str]] = []
    for marker in (i for i, line in enumerate(lines) if "=== notification" in line):
        email: list[str] = []
        for line in lines[marker + 1 :]:
            if "=== notification" in line or line.startswith(
                ("127.0.0.1 - -", "{", "Found ", "refused ", "admin ")
            ):
                break
            email.append(line)
        while email and not email[-1].strip():
            email.pop()
        emails.append(email)
    return emails


def email_summary(email: list[str]) -> list[str]:
    """An e-mail's subject and its links, one line each."""
    subject = next((line.strip() for line in email if line.startswith("Subject:")), "(no subject)")
    lines = [f"  {subject}"]
    for label, link in itertools.pairwise(email):
        if link.strip().startswith("http") and label.strip().endswith(":"):
            lines.append(f"    {label.strip()} {link.strip()}")
    return lines


def wrap(text: str, indent: str = "    ", width: int = 100) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent)


def report(
    outcome: dict[str, Any], calls: int, session: str, where: dict[str, str], emails_file: Path
) -> list[str]:
    told: dict[str, tuple[int, mt.CallToolResult]] = outcome["told"]
    lines = [
        "",
        "What the agent did",
        f"  called delete_tag {calls} times in {outcome['elapsed']:.1f} s, in session {session}",
        f"  through the MCP server {where['mcp']} (examples/articles_server.py)",
        f"  {outcome['allowed']} ran (tags really deleted: {outcome['deletions']}), "
        f"{outcome['refused']} were refused without running",
        "",
        "What the agent was told (a tool result with isError: true, not a protocol error)",
    ]
    if not told:
        lines.append("  nothing: no call was refused (is the write limit above the calls made?)")
    for kind, (number, result) in sorted(told.items(), key=lambda item: item[1][0]):
        lines.append(f"  from call {number} on ({kind}):")
        lines += wrap(text_of(result))
    emails = where["emails"]
    return [*lines, "", emails, *where["summaries"].splitlines()]


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
        state = admin_view(base_url, session)
        emails = emails_from(service_log)
    emails_file = logs / "emails.txt"
    emails_file.write_text("\n\n".join("\n".join(email) for email in emails) + "\n")
    if service_log is None:
        heading = "What the administrator received: see the quota service's console"
        summaries: list[str] = []
    else:
        heading = (
            f"What the administrator received: {len(emails)} e-mails; "
            f"the full e-mails are in: {emails_file}"
        )
        summaries = [line for email in emails for line in email_summary(email)]
    where = {"mcp": mcp_url, "emails": heading, "summaries": "\n".join(summaries)}
    lines = report(outcome, args.calls, session, where, emails_file)
    lines += ["", "The session now", *state]
    principal = "token:dev-server"
    admin = f"MCP_QUOTA_URL={base_url} MCP_QUOTA_ADMIN_TOKEN={ADMIN_TOKEN}"
    if service_log is None:
        further = f"Look further (with {admin})"
    else:
        further = (
            "Look further (this demo's service stopped with it: run `make run`, then "
            "`MCP_QUOTA_URL=http://127.0.0.1:8000 make demo`, and use its URL)"
        )
    lines += [
        "",
        further,
        f"  mcp-quota session show {shlex.quote(session)}",
        f"  mcp-quota audit --session {shlex.quote(session)}",
        f"  mcp-quota principal show {shlex.quote(principal)}",
        f"  console: {base_url}/console#/session/{session}",
    ]
    if service_log is not None:
        lines.append(f"  service log: {service_log}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
