"""`mcp-quota-proxy` in front of a server we did not write in Python (issue 23).

The quota service runs as `make run` runs it; the TypeScript tags server (official
TypeScript SDK) runs behind the proxy over stdio or over streamable HTTP; the callers
are a fastmcp client and the MCP Inspector CLI, one process per call. The upstream's
own record of deletions is the witness: exactly 15 of 20 deletes may happen.
"""

from __future__ import annotations

import asyncio
import shlex
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as mt
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from launch import SERVER_TOKEN, Running, spawn_quota_service, wait_healthy
from mcp_quota_client import META_CALL_ID_KEY, META_DECISION_KEY, META_SESSION_KEY
from pydantic import TypeAdapter

from tests.mcp.proxy_support import (
    deletions,
    inspector,
    spawn_proxy,
    spawn_tags_http,
    tags_command,
)

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

CALLS = 20
WRITE_LIMIT = 15  # the default policy's write budget per session
HEALTHY_WITHIN = 120.0  # seconds: generous, the suite shares two cores


@dataclass(frozen=True)
class Stack:
    """A proxy, the upstream behind it, and the upstream's record of deletions."""

    kind: str
    proxy: Running
    record: Path
    upstream_url: str | None

    @property
    def url(self) -> str:
        return f"{self.proxy.url}/mcp"


def start(*processes: Running) -> None:
    for running in processes:
        wait_healthy(running, timeout=HEALTHY_WITHIN)


def stop(*processes: Running) -> None:
    for running in reversed(processes):
        running.stop()


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("proxy-logs")


@pytest.fixture(scope="module")
def real_service(logs: Path) -> Iterator[Running]:
    service = spawn_quota_service(logs)
    try:
        start(service)
        yield service
    finally:
        stop(service)


@pytest.fixture(scope="module", params=["stdio", "http"])
def stack(request: pytest.FixtureRequest, real_service: Running, logs: Path) -> Iterator[Stack]:
    """The proxy in front of the tags server, run over stdio or over HTTP."""
    kind: str = request.param
    record = logs / f"deletions-{kind}.jsonl"
    started: list[Running] = []
    try:
        if kind == "stdio":
            upstream = ["--upstream-command", shlex.join(tags_command(record))]
            upstream_url = None
        else:
            tags = spawn_tags_http(record, logs)
            started.append(tags)
            start(tags)
            upstream_url = f"{tags.url}/mcp"
            upstream = ["--upstream-url", upstream_url]
        proxy = spawn_proxy(upstream, real_service.url, SERVER_TOKEN, logs, name=f"proxy-{kind}")
        started.append(proxy)
        start(proxy)
        yield Stack(kind, proxy, record, upstream_url)
    finally:
        stop(*started)


def new_session() -> str:
    return f"proxy-{uuid.uuid4().hex[:12]}"


def text_of(result: mt.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, mt.TextContent)
    return block.text


def mine(record: Path, session: str) -> list[str]:
    """Tags this test deleted (each test's tags carry its session id)."""
    return [entry["tag"] for entry in deletions(record) if entry["tag"].startswith(session)]


def assert_refusal_says_why(structured: dict[str, Any] | None, text: str, session: str) -> None:
    assert structured is not None
    assert structured["kind"] == "quota_exceeded"
    assert (structured["category"], structured["scope"]) == ("write", "session")
    assert (structured["used"], structured["limit"]) == (WRITE_LIMIT, WRITE_LIMIT)
    assert structured["retryAfterSeconds"] > 0
    assert "The tool 'delete_tag' was NOT run" in text
    assert f"session '{session}'" in text
    assert f"({WRITE_LIMIT}/{WRITE_LIMIT} calls)" in text


async def test_20_deletes_from_a_fastmcp_client_delete_exactly_15(stack: Stack) -> None:
    session = new_session()
    meta = {META_SESSION_KEY: session}
    async with Client(stack.url) as client:
        results = [
            await client.call_tool_mcp("delete_tag", {"tag": f"{session}-{i}"}, meta=meta)
            for i in range(CALLS)
        ]
        listed = await client.call_tool_mcp("list_deletions", {}, meta=meta)

    assert [r.is_error for r in results] == [False] * WRITE_LIMIT + [True] * (CALLS - WRITE_LIMIT)
    for refused in results[WRITE_LIMIT:]:
        assert_refusal_says_why(refused.structured_content, text_of(refused), session)
    expected = [f"{session}-{i}" for i in range(WRITE_LIMIT)]
    assert mine(stack.record, session) == expected
    # The read-only tool ran too (counted as a read) and saw the same 15.
    assert listed.is_error is False
    assert listed.structured_content is not None
    assert [t for t in listed.structured_content["tags"] if t.startswith(session)] == expected
    assert listed.meta is not None
    assert listed.meta[META_DECISION_KEY]["category"] == "read"


# One process per call is about the client's side: the upstream's transport (both held
# by the fastmcp tests above) changes nothing here, and 20 Inspector processes cost ~15 s.
@pytest.mark.parametrize("stack", ["stdio"], indirect=True)
def test_20_deletes_from_the_inspector_cli_one_process_each_delete_exactly_15(
    stack: Stack,
) -> None:
    session = new_session()
    runs = [
        inspector(
            stack.url,
            "tools/call",
            "--tool-name",
            "delete_tag",
            "--tool-arg",
            f"tag={session}-{i}",
            "--tool-metadata",
            f"{META_SESSION_KEY}={session}",
        )
        for i in range(CALLS)
    ]

    for run in runs[:WRITE_LIMIT]:
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.result().get("isError") in (None, False)
    for run in runs[WRITE_LIMIT:]:
        result = run.result()  # the CLI prints the tool result, and exits non-zero on isError
        assert run.returncode != 0
        assert result["isError"] is True
        [block] = result["content"]
        assert_refusal_says_why(result.get("structuredContent"), block["text"], session)
    assert mine(stack.record, session) == [f"{session}-{i}" for i in range(WRITE_LIMIT)]


async def test_tools_list_keeps_the_upstreams_annotations(stack: Stack) -> None:
    async with Client(stack.url) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}

    assert set(tools) == {"delete_tag", "delete_tags", "list_deletions"}
    delete, listing = tools["delete_tag"], tools["list_deletions"]
    assert delete.annotations is not None
    assert delete.annotations.destructive_hint is True
    assert delete.annotations.read_only_hint is False
    assert listing.annotations is not None
    assert listing.annotations.read_only_hint is True
    assert delete.input_schema["required"] == ["tag"]


def _wire(result: Any) -> dict[str, Any]:
    """A list result as its JSON, less the result's own `_meta` (stamped per hop)."""
    dumped: dict[str, Any] = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("_meta", None)
    return dumped


def _direct(stack: Stack) -> Client[Any]:
    """A client of the upstream itself, not through the proxy."""
    if stack.upstream_url is not None:
        return Client(stack.upstream_url, mode="legacy")
    command, *args = tags_command(stack.record)
    return Client(StdioTransport(command, args), mode="legacy")


async def test_the_lists_and_server_info_are_the_upstreams_byte_for_byte(stack: Stack) -> None:
    """Defect class: a visible proxy (FastMCP's added `title`, `_meta.fastmcp.tags`
    and its own serverInfo 4.2.3 instead of the upstream's). Both sides speak the
    upstream's protocol era (the TypeScript SDK's handshake era): a 2026-07-28 client
    is sent the same lists less the fields its era no longer has (`execution`)."""
    async with Client(stack.url, mode="legacy") as client:
        proxied = [
            await client.list_tools_mcp(),
            await client.list_resources_mcp(),
            await client.list_prompts_mcp(),
        ]
        info = client.server_info
    async with _direct(stack) as client:
        direct = [
            await client.list_tools_mcp(),
            await client.list_resources_mcp(),
            await client.list_prompts_mcp(),
        ]

    for through, upstream in zip(proxied, direct, strict=True):
        assert _wire(through) == _wire(upstream)
    assert info is not None
    assert (info.name, info.version) == ("tags", "1.0.0")


async def _as_sent(
    client: Client[Any], tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None
) -> dict[str, Any]:
    """A `tools/call` result as the server sent it: no model fills in its defaults."""
    params = mt.CallToolRequestParams(name=tool, arguments=arguments, _meta=meta)  # type: ignore[arg-type]
    adapter: Any = TypeAdapter(dict[str, Any])  # the SDK validates with any adapter alike
    result: dict[str, Any] = await client.session.send_request(
        mt.CallToolRequest(params=params), adapter
    )
    return result


async def test_a_tool_result_is_the_upstreams_byte_for_byte(stack: Stack) -> None:
    """Defect class: a result rebuilt on the way through (a model that fills in
    `isError: false` the upstream never sent). Apart from the decision the proxy adds
    to its `_meta`, the agent gets what the upstream sent. (A read: the module's writes
    are counted against the tests that follow.)"""
    meta = {META_SESSION_KEY: new_session()}
    async with Client(stack.url, mode="legacy") as client:
        through = await _as_sent(client, "list_deletions", {}, meta)
    async with _direct(stack) as client:
        direct = await _as_sent(client, "list_deletions", {}, None)

    meta = through.pop("_meta")
    assert meta.pop(META_DECISION_KEY)["outcome"] == "allowed"
    assert meta == direct.pop("_meta", {})
    assert through == direct
    assert "isError" not in through


async def test_the_inspector_lists_the_tools_with_their_annotations(stack: Stack) -> None:
    run = inspector(stack.url, "tools/list")

    assert run.returncode == 0, run.stderr[-2000:]
    tools = {tool["name"]: tool for tool in run.result()["tools"]}
    assert tools["delete_tag"]["annotations"]["destructiveHint"] is True
    assert tools["list_deletions"]["annotations"]["readOnlyHint"] is True


async def test_an_upstream_error_comes_back_unchanged(stack: Stack) -> None:
    meta = {META_SESSION_KEY: new_session()}
    async with Client(stack.url) as client:
        through_proxy = await client.call_tool_mcp("delete_tag", {"tag": "protected"}, meta=meta)
        # The upstream's own argument validation, not the proxy's.
        invalid = await client.call_tool_mcp("delete_tag", {"tag": 5}, meta=meta)
    if stack.upstream_url is not None:
        async with Client(stack.upstream_url) as client:
            direct = await client.call_tool_mcp("delete_tag", {"tag": "protected"})
            direct_invalid = await client.call_tool_mcp("delete_tag", {"tag": 5})
        assert through_proxy.content == direct.content
        assert through_proxy.structured_content == direct.structured_content
        assert invalid.content == direct_invalid.content

    assert through_proxy.is_error is True
    assert text_of(through_proxy) == "tag 'protected' cannot be deleted"
    assert through_proxy.structured_content is None
    assert invalid.is_error is True
    assert "Invalid arguments for tool delete_tag" in text_of(invalid)


async def test_resources_and_prompts_pass_through_and_the_name_is_the_upstreams(
    stack: Stack,
) -> None:
    async with Client(stack.url) as client:
        [contents] = await client.read_resource("tags://deletions")
        prompt = await client.get_prompt("tag_report", {"tag": "ai"})
        name = client.server_info.name if client.server_info else None

    assert isinstance(contents, mt.TextResourceContents)
    assert contents.text.startswith("[")
    [message] = prompt.messages
    assert isinstance(message.content, mt.TextContent)
    assert message.content.text == "Report on tag 'ai'."
    assert name == "tags"


async def test_a_call_to_an_unknown_tool_is_the_upstreams_answer_not_a_quota_check(
    stack: Stack,
) -> None:
    session = new_session()
    meta = {META_SESSION_KEY: session}
    async with Client(stack.url) as client:
        result = await client.call_tool_mcp("drop_database", {}, meta=meta)
        after = await client.call_tool_mcp("delete_tag", {"tag": f"{session}-0"}, meta=meta)

    assert result.is_error is True
    assert "NOT run" not in text_of(result)
    # Nothing was counted for the unknown tool: the first delete is the first write.
    assert after.meta is not None
    assert after.meta[META_DECISION_KEY]["used"] == 1


async def test_20_concurrent_deletes_from_20_clients_delete_exactly_15(stack: Stack) -> None:
    # All through the proxy's one upstream session (or process) at once.
    session = new_session()
    meta = {META_SESSION_KEY: session}

    async def one(i: int) -> mt.CallToolResult:
        async with Client(stack.url) as client:
            result: mt.CallToolResult = await client.call_tool_mcp(
                "delete_tag", {"tag": f"{session}-{i}"}, meta=meta
            )
        return result

    results = await asyncio.gather(*(one(i) for i in range(CALLS)))

    assert sorted(r.is_error for r in results) == [False] * WRITE_LIMIT + [True] * (
        CALLS - WRITE_LIMIT
    )
    for refused in (r for r in results if r.is_error):
        assert_refusal_says_why(refused.structured_content, text_of(refused), session)
    ran = {f"{session}-{i}" for i, r in enumerate(results) if not r.is_error}
    assert sorted(mine(stack.record, session)) == sorted(ran)


async def test_concurrent_deletes_sharing_one_agent_chosen_id_run_once_each_round(
    stack: Stack,
) -> None:
    """Issue 28, class 3: the agent chooses the call id through the proxy. 8 concurrent
    deletes of different tags under one id, 10 rounds, ran 32 deletions upstream in a
    session whose write limit was 5. A call id binds the arguments (the proxy always sends
    their digest): of each round, one runs; the others are told the id names another
    call, and never reach the upstream."""
    session = new_session()
    rounds = 3

    async def one(round_: int, i: int) -> mt.CallToolResult:
        meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"agent-{round_}"}
        async with Client(stack.url) as client:
            result: mt.CallToolResult = await client.call_tool_mcp(
                "delete_tag", {"tag": f"{session}-{round_}-{i}"}, meta=meta
            )
        return result

    ran = 0
    for round_ in range(rounds):
        results = await asyncio.gather(*(one(round_, i) for i in range(8)))
        ran += sum(not r.is_error for r in results)
        assert sum(not r.is_error for r in results) <= 1
        for refused in (r for r in results if r.is_error):
            assert "was NOT run" in text_of(refused)
    # A round's one call may also be refused closed on a loaded machine (its check past
    # the client's deadline): never more than one a round, and what ran is what the
    # upstream did.
    assert len(mine(stack.record, session)) == ran and 1 <= ran <= rounds
