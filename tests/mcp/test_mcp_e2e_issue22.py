"""Issue 22 end to end: the quota service as `make run` starts it (once with the default
policy, once with writes in shadow mode), the example FastMCP server over streamable
HTTP, and a real MCP client; the service is also asked over plain HTTP."""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import Client
from launch import Running, healthy, spawn_articles_server, spawn_quota_service
from mcp_quota_client import META_DECISION_KEY, META_SESSION_KEY, META_SHADOW_KEY

from chalicelib.quota.policy import POLICY_DIR
from tests.e2e.http import ADMIN_TOKEN, call
from tests.support import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]
STATS_URI = "stats://articles"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-issue22-logs")


@pytest.fixture(scope="module")
def enforcing(logs: Path) -> Iterator[tuple[Running, Running]]:
    service = spawn_quota_service(logs)
    server = spawn_articles_server(service.url, logs)
    with healthy(service, server):
        yield service, server


@pytest.fixture(scope="module")
def shadowed(logs: Path) -> Iterator[tuple[Running, Running]]:
    policy = json.loads((POLICY_DIR / "default.json").read_text())
    policy["categories"]["write"]["enforce"] = False
    path = logs / "shadow-policy.json"
    path.write_text(json.dumps(policy))
    service = spawn_quota_service(logs, policy=str(path))
    server = spawn_articles_server(service.url, logs)
    with healthy(service, server):
        yield service, server


def session() -> dict[str, Any]:
    return {META_SESSION_KEY: f"e2e22-{uuid.uuid4().hex[:10]}"}


def text_of(result: mt.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, mt.TextContent)
    return block.text


async def stats(client: Client[Any]) -> dict[str, int]:
    [contents] = await client.read_resource(STATS_URI)
    assert isinstance(contents, mt.TextResourceContents)
    loaded: dict[str, int] = json.loads(contents.text)
    return loaded


def tags(prefix: str, n: int) -> dict[str, Any]:
    return {"tags": [f"{prefix}{i}" for i in range(n)]}


async def test_a_bulk_delete_is_counted_per_tag_and_refused_whole(
    enforcing: tuple[Running, Running],
) -> None:
    _, server = enforcing
    meta = session()
    async with Client(f"{server.url}/mcp") as client:
        before = await stats(client)
        ten = await client.call_tool_mcp("delete_tags", tags("t", 10), meta=meta)
        six = await client.call_tool_mcp("delete_tags", tags("u", 6), meta=meta)
        five = await client.call_tool_mcp("delete_tags", tags("u", 5), meta=meta)
        after = await stats(client)
    assert ten.is_error is False and ten.meta is not None
    assert ten.meta[META_DECISION_KEY]["used"] == 10
    assert six.is_error is True
    assert "asks for 6 'write' units" in text_of(six) and "has 5 units left" in text_of(six)
    assert five.is_error is False
    assert after["deletions"] - before["deletions"] == 15


def test_units_over_http(enforcing: tuple[Running, Running]) -> None:
    service, _ = enforcing
    sid = f"http-{uuid.uuid4().hex[:8]}"
    body = {"session_id": sid, "tool": "delete_tags", "units": 12}
    first = call(f"{service.url}/v1/check", "POST", body)
    assert first.status == 200 and first.body["used"] == 12
    second = call(f"{service.url}/v1/check", "POST", {**body, "units": 4})
    assert second.status == 429 and "has 3 units left" in second.body["error"]["message"]
    bad = call(f"{service.url}/v1/check", "POST", {**body, "units": 1001})
    assert bad.status == 400 and bad.body["error"]["field"] == "units"


async def test_a_loop_on_the_same_call_is_broken_and_the_tool_not_run(
    enforcing: tuple[Running, Running],
) -> None:
    _, server = enforcing
    meta = session()
    async with Client(f"{server.url}/mcp") as client:
        before = await stats(client)
        results = [
            await client.call_tool_mcp("delete_tag", {"tag": "loop"}, meta=meta) for _ in range(4)
        ]
        after = await stats(client)
    assert [r.is_error for r in results] == [False, False, False, True]
    # The service runs on the real clock: the window's end is whichever 10 minutes it is.
    assert re.fullmatch(
        r"The tool 'delete_tag' was NOT run: it was already called with the same arguments 3 "
        r"times in this 10-minute window, which ends at \d\d:\d0 UTC\. Repeating it will not "
        r"help: stop and tell the user\.",
        text_of(results[3]),
    )
    assert results[3].structured_content is not None
    assert results[3].structured_content["kind"] == "repeated_call"
    assert after["deletions"] - before["deletions"] == 3


async def test_a_refusal_storm_is_answered_mostly_by_the_server_itself(
    enforcing: tuple[Running, Running],
) -> None:
    _, server = enforcing
    meta = session()
    async with Client(f"{server.url}/mcp") as client:
        before = await stats(client)
        results = [
            await client.call_tool_mcp("delete_tag", {"tag": f"x{i}"}, meta=meta) for i in range(40)
        ]
        after = await stats(client)
    assert [r.is_error for r in results] == [False] * 15 + [True] * 25
    # The service's own words (only the time the counter resets at moves on).
    assert len({text_of(r).split(" the counter resets")[0] for r in results[15:]}) == 1
    local = after["quota_refused_locally"] - before["quota_refused_locally"]
    asked = after["quota_checks"] - before["quota_checks"]
    assert local >= 20 and asked == 40 - local
    assert after["deletions"] - before["deletions"] == 15


async def test_shadow_mode_lets_the_call_run_and_says_what_would_have_refused_it(
    shadowed: tuple[Running, Running],
) -> None:
    service, server = shadowed
    meta = session()
    async with Client(f"{server.url}/mcp") as client:
        before = await stats(client)
        results = [
            await client.call_tool_mcp("delete_tag", {"tag": f"s{i}"}, meta=meta) for i in range(17)
        ]
        after = await stats(client)
    assert not any(r.is_error for r in results)
    assert after["deletions"] - before["deletions"] == 17
    assert all(META_SHADOW_KEY not in (r.meta or {}) for r in results[:15])
    notice = (results[15].meta or {})[META_SHADOW_KEY]
    assert notice["code"] == "quota_exceeded" and notice["scope"] == "session"
    assert "(15/15 calls)" in notice["message"]
    trail = call(f"{service.url}/v1/audit?limit=500", token=ADMIN_TOKEN).body["events"]
    shadows = [e for e in trail if e["type"] == "shadow_refusal"]
    mine = [e for e in shadows if e["detail"]["session_id"] == meta[META_SESSION_KEY]]
    assert len(mine) == 2 and mine[0]["detail"]["server"] == "articles"
    # The operator's "would have refused" view, grouped by server, principal and tool.
    env = {**os.environ, "MCP_QUOTA_URL": service.url, "MCP_QUOTA_ADMIN_TOKEN": ADMIN_TOKEN}
    cli = str(ROOT / ".venv" / "bin" / "mcp-quota")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli, *args], check=False, env=env, capture_output=True, text=True, timeout=60
        )

    done = run("--json", "shadow")
    assert done.returncode == 0, done.stderr
    [group] = [g for g in json.loads(done.stdout)["groups"] if g["tool"] == "delete_tag"]
    assert group["server"] == "articles" and group["refusals"] >= 2
    assert group["categories"] == ["write"] and group["scopes"] == ["session"]
    text = run("shadow")
    assert "WOULD REFUSE" in text.stdout and "delete_tag" in text.stdout
