"""Issue 32 at the MCP side: a retried write runs once, and a call that needs a person's
approval is answered as the client supports it.

Real parts: the quota service as `make run` starts it (with a policy whose
`delete_tags` needs an approval), `mcp-quota-proxy` in front of the TypeScript tags
server (official TypeScript SDK) over stdio, a FastMCP server with `QuotaMiddleware`,
and FastMCP clients. The upstream's own record (or the FastMCP tool's own count) is the
witness of how often a tool ran; an administrator approves through the admin HTTP API.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import anyio
import httpx2
import mcp_types as mt
import pytest
from fastmcp import Client, FastMCP
from fastmcp.server.context import Context
from launch import ADMIN_TOKEN, SERVER_TOKEN, Running, spawn_quota_service, wait_healthy
from mcp import Client as SdkClient
from mcp.server.mcpserver import MCPServer
from mcp_quota_client import (
    META_CALL_ID_KEY,
    META_DECISION_KEY,
    META_SESSION_KEY,
    QuotaClient,
    QuotaClientConfig,
)
from mcp_quota_client.fastmcp import QuotaMiddleware
from mcp_quota_client.mcp_sdk import protect
from mcp_quota_client.results import REPLAYED_META

from chalicelib.quota.policy import POLICY_DIR
from tests.mcp.proxy_support import deletions, inspector, spawn_proxy, tags_command

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

HEALTHY_WITHIN = 120.0  # seconds: generous, the suite shares two cores
APPROVED_TOOLS = ["delete_tags", "wire_money"]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("issue32-logs")


@pytest.fixture(scope="module")
def service(logs: Path) -> Iterator[Running]:
    """The quota service, with the default policy plus approval rules."""
    policy = json.loads((POLICY_DIR / "default.json").read_text())
    policy["rules"] = [
        {"tools": APPROVED_TOOLS, "category": "write", "approval": True},
        *policy["rules"],
    ]
    path = logs / "policy.json"
    path.write_text(json.dumps(policy))
    running = spawn_quota_service(logs, str(path))
    try:
        wait_healthy(running, timeout=HEALTHY_WITHIN)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def proxy(service: Running, logs: Path) -> Iterator[tuple[Running, Path]]:
    """`mcp-quota-proxy` over HTTP in front of the tags server over stdio."""
    record = logs / "deletions.jsonl"
    upstream = ["--upstream-command", shlex.join(tags_command(record))]
    running = spawn_proxy(upstream, service.url, SERVER_TOKEN, logs, name="proxy-32")
    try:
        wait_healthy(running, timeout=HEALTHY_WITHIN)
        yield running, record
    finally:
        running.stop()


def new_session() -> str:
    return f"i32-{uuid.uuid4().hex[:12]}"


def text_of(result: mt.CallToolResult) -> str:
    [block] = result.content
    assert isinstance(block, mt.TextContent)
    return block.text


def replayed(result: mt.CallToolResult) -> bool:
    return bool((result.meta or {}).get(REPLAYED_META))


def approve(service: Running, approval_id: str) -> None:
    """What an administrator does on the console page: the admin HTTP API."""
    answer = httpx2.post(
        f"{service.url}/v1/approvals/{approval_id}/approve",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        json={"reason": "test"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def shown_to_the_approver(service: Running, approval_id: str) -> Any:
    answer = httpx2.get(
        f"{service.url}/v1/approvals/{approval_id}",
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def approval_id_of(url: str) -> str:
    return url.rsplit("/", 1)[-1]


# -- exactly-once through the proxy -------------------------------------------------


async def test_one_call_id_3_times_then_8_at_once_runs_the_upstream_once(
    proxy: tuple[Running, Path],
) -> None:
    """Defect class: a retried delete (a broken stream's re-send) deletes again."""
    running, record = proxy
    session = new_session()
    tag = f"{session}-once"
    meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"{session}-call"}

    async def one() -> mt.CallToolResult:
        async with Client(f"{running.url}/mcp") as client:
            result: mt.CallToolResult = await client.call_tool_mcp(
                "delete_tag", {"tag": tag}, meta=meta
            )
        return result

    in_a_row = [await one() for _ in range(3)]
    at_once = await asyncio.gather(*(one() for _ in range(8)))

    runs = [entry for entry in deletions(record) if entry["tag"] == tag]
    assert len(runs) == 1
    every = [*in_a_row, *at_once]
    assert [r.is_error for r in every] == [False] * 11
    assert {text_of(r) for r in every} == {f"deleted tag '{tag}'"}
    assert {json.dumps(r.structured_content) for r in every} == {json.dumps({"deleted": tag})}
    assert [replayed(r) for r in every] == [False] + [True] * 10


async def test_a_replayed_error_is_the_first_runs_error(proxy: tuple[Running, Path]) -> None:
    """Defect class: a retry of a failed write tries the write again."""
    running, _ = proxy
    session = new_session()
    meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"{session}-p"}
    async with Client(f"{running.url}/mcp") as client:
        first = await client.call_tool_mcp("delete_tag", {"tag": "protected"}, meta=meta)
        again = await client.call_tool_mcp("delete_tag", {"tag": "protected"}, meta=meta)
    assert first.is_error and again.is_error
    assert text_of(again) == text_of(first) == "tag 'protected' cannot be deleted"
    assert replayed(again) and not replayed(first)


async def test_reads_run_again(proxy: tuple[Running, Path]) -> None:
    """Defect class: a read's retry answered with a stale result."""
    running, _ = proxy
    session = new_session()
    meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"{session}-r"}
    async with Client(f"{running.url}/mcp") as client:
        before = await client.call_tool_mcp("list_deletions", {}, meta=meta)
        wrote = {"tag": f"{session}-x"}
        await client.call_tool_mcp("delete_tag", wrote, meta=session_only(session))
        after = await client.call_tool_mcp("list_deletions", {}, meta=meta)
    assert not replayed(after)
    assert after.structured_content is not None and before.structured_content is not None
    assert after.structured_content["count"] == before.structured_content["count"] + 1


def session_only(session: str) -> dict[str, Any]:
    return {META_SESSION_KEY: session}


# -- approvals through the proxy ---------------------------------------------------


async def test_a_client_without_url_elicitation_is_told_to_ask_its_user_then_runs_once(
    service: Running, proxy: tuple[Running, Path]
) -> None:
    """Defect class: a tool that needs a person's approval runs on the agent's say-so,
    or runs twice on one approval."""
    running, record = proxy
    session = new_session()
    tags = [f"{session}-a", f"{session}-b"]

    async def call() -> mt.CallToolResult:
        async with Client(f"{running.url}/mcp") as client:
            result: mt.CallToolResult = await client.call_tool_mcp(
                "delete_tags", {"tags": tags}, meta=session_only(session)
            )
        return result

    asked = await call()
    assert asked.is_error
    structured = asked.structured_content
    assert structured is not None and structured["kind"] == "approval_required"
    url = structured["url"]
    assert url in text_of(asked) and "Ask your user to approve it" in text_of(asked)
    assert "retry the same call with the same arguments" in text_of(asked)
    assert [e for e in deletions(record) if e["tag"] in tags] == []
    assert (await call()).structured_content == structured  # still pending: the same one
    # The approver sees what the call would do: the arguments as the proxy got them.
    shown = shown_to_the_approver(service, structured["approvalId"])
    assert shown["arguments_preview"] == json.dumps({"tags": tags}, ensure_ascii=False)

    approve(service, structured["approvalId"])
    retries = await asyncio.gather(*(call() for _ in range(8)))

    assert sum(not r.is_error for r in retries) == 1
    assert sorted(e["tag"] for e in deletions(record) if e["tag"] in tags) == tags
    for refused in (r for r in retries if r.is_error):
        assert refused.structured_content is not None
        assert refused.structured_content["kind"] == "approval_required"


async def test_a_client_with_url_elicitation_opens_the_page_and_its_retry_runs_once(
    service: Running, proxy: tuple[Running, Path]
) -> None:
    """Defect class: an approval's retry is a new call (a new id), or the agent's client
    gets an input request it did not declare."""
    running, record = proxy
    session = new_session()
    tags = [f"{session}-e"]
    opened: list[mt.ElicitRequestURLParams] = []

    async def user_opens_the_page(
        message: str, response_type: object, params: Any, context: object
    ) -> Any:
        assert isinstance(params, mt.ElicitRequestURLParams)
        opened.append(params)
        approve(service, approval_id_of(params.url))  # the administrator, signed in
        return mt.ElicitResult(action="accept")

    async with Client(f"{running.url}/mcp", elicitation_handler=user_opens_the_page) as client:
        result = await client.call_tool_mcp(
            "delete_tags", {"tags": tags}, meta=session_only(session)
        )

    assert not result.is_error, result
    assert len(opened) == 1 and "/console#/approvals/ap_" in opened[0].url
    assert "needs an administrator's approval" in opened[0].message
    assert [e["tag"] for e in deletions(record) if e["tag"] in tags] == tags


def test_the_inspector_cli_is_told_where_to_approve_and_its_rerun_runs_once(
    service: Running, proxy: tuple[Running, Path]
) -> None:
    """Defect class: a client we did not write (no elicitation) cannot get through an
    approval, or its rerun after one runs twice."""
    running, record = proxy
    session = new_session()
    tags = [f"{session}-i"]

    def run() -> Any:
        return inspector(
            f"{running.url}/mcp",
            "tools/call",
            "--tool-name",
            "delete_tags",
            "--tool-arg",
            f"tags={json.dumps(tags)}",
            "--tool-metadata",
            f"{META_SESSION_KEY}={session}",
        )

    asked = run()
    result = asked.result()
    assert result["isError"] is True, asked.stderr[-2000:]
    structured = result["structuredContent"]
    assert structured["kind"] == "approval_required"
    assert structured["url"] in result["content"][0]["text"]
    approve(service, structured["approvalId"])
    rerun = run()
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert rerun.result().get("isError") in (None, False)
    assert [e["tag"] for e in deletions(record) if e["tag"] in tags] == tags


# -- exactly-once and approvals through the FastMCP middleware ----------------------


class Ledger:
    """A FastMCP server whose tools count their own runs."""

    def __init__(self, service: Running) -> None:
        self.runs: Counter[str] = Counter()
        self.gate = anyio.Event()
        self.gated: set[str] = set()
        quota = QuotaClient(QuotaClientConfig(base_url=service.url, token=SERVER_TOKEN))
        self.server = FastMCP("ledger")
        self.middleware = QuotaMiddleware(quota)
        self.server.add_middleware(self.middleware)
        self.quota = quota

        @self.server.tool(annotations={"destructiveHint": True})
        async def delete_entry(entry: str) -> str:
            self.runs[entry] += 1
            if entry in self.gated:
                await self.gate.wait()
            return f"deleted {entry}"

        @self.server.tool(annotations={"destructiveHint": True})
        async def confirm_delete(entry: str, ctx: Context) -> Any:
            if ctx.input_responses is None:  # an MRTR round: ask the user first
                return mt.InputRequiredResult(
                    input_requests={
                        "confirm": mt.ElicitRequest(
                            params=mt.ElicitRequestFormParams(
                                message=f"Delete {entry}?",
                                requested_schema={"type": "object", "properties": {}},
                            )
                        )
                    },
                    request_state=f"asked:{entry}",
                )
            self.runs[entry] += 1
            return f"deleted {entry}"

        @self.server.tool(annotations={"destructiveHint": True})
        async def archive_all(label: str) -> str:
            self.runs[label] += 1
            return "x" * (70 * 1024)  # more than the service keeps

        @self.server.tool(annotations={"destructiveHint": True})
        async def wire_money(amount: int) -> str:
            self.runs[f"wire-{amount}"] += 1
            return f"wired {amount}"


@pytest.fixture
async def ledger(service: Running) -> AsyncIterator[Ledger]:
    made = Ledger(service)
    try:
        yield made
    finally:
        await made.quota.aclose()


async def test_the_middleware_runs_one_call_id_once(ledger: Ledger) -> None:
    """Defect class: the FastMCP middleware runs a retried write again."""
    session = new_session()
    meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"{session}-m"}
    async with Client(ledger.server) as client:
        in_a_row = [
            await client.call_tool_mcp("delete_entry", {"entry": "e1"}, meta=meta) for _ in range(3)
        ]
        at_once = await asyncio.gather(
            *(client.call_tool_mcp("delete_entry", {"entry": "e1"}, meta=meta) for _ in range(8))
        )
    assert ledger.runs["e1"] == 1
    every = [*in_a_row, *at_once]
    assert {text_of(r) for r in every} == {"deleted e1"}
    assert [replayed(r) for r in every] == [False] + [True] * 10
    assert [(r.meta or {})[META_DECISION_KEY]["duplicate"] for r in every] == [False] + [True] * 10


async def test_a_copy_that_comes_while_the_first_runs_waits_for_its_result(
    ledger: Ledger,
) -> None:
    """Defect class: a copy of a slow write, sent while it runs, runs it again."""
    session = new_session()
    meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"{session}-slow"}
    ledger.gated.add("slow")
    waiting = asyncio.Event()
    pause = ledger.middleware.once.sleep

    async def noted_pause(seconds: float) -> None:
        waiting.set()  # a copy heard "running" and waits to ask again
        await pause(seconds)

    ledger.middleware.once.sleep = noted_pause
    async with Client(ledger.server) as client:
        first = asyncio.ensure_future(
            client.call_tool_mcp("delete_entry", {"entry": "slow"}, meta=meta)
        )
        while ledger.runs["slow"] == 0:  # the first run has started
            await asyncio.sleep(0.01)
        copy = asyncio.ensure_future(
            client.call_tool_mcp("delete_entry", {"entry": "slow"}, meta=meta)
        )
        await waiting.wait()
        ledger.gate.set()
        results = await asyncio.gather(first, copy)
    assert ledger.runs["slow"] == 1
    assert [text_of(r) for r in results] == ["deleted slow"] * 2
    assert [replayed(r) for r in results] == [False, True]


async def test_a_copy_past_its_wait_is_told_the_call_is_in_progress(ledger: Ledger) -> None:
    """Defect class: a copy that cannot wait runs the call again, or hangs."""
    session = new_session()
    meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"{session}-busy"}
    ledger.gated.add("busy")
    ledger.middleware.once.wait_seconds = 0
    async with Client(ledger.server) as client:
        first = asyncio.ensure_future(
            client.call_tool_mcp("delete_entry", {"entry": "busy"}, meta=meta)
        )
        while ledger.runs["busy"] == 0:
            await asyncio.sleep(0.01)
        copy = await client.call_tool_mcp("delete_entry", {"entry": "busy"}, meta=meta)
        ledger.gate.set()
        await first
        later = await client.call_tool_mcp("delete_entry", {"entry": "busy"}, meta=meta)
    assert ledger.runs["busy"] == 1
    assert copy.is_error and (copy.structured_content or {})["kind"] == "call_in_progress"
    assert text_of(later) == "deleted busy" and replayed(later)


async def test_an_mrtr_round_goes_on_and_its_re_sent_end_is_replayed(ledger: Ledger) -> None:
    """Defect class: a write tool that asks the user first (MRTR) never gets its second
    round (told "in progress": no result was kept for the first), or a re-send of the
    finished call runs it again."""
    session = new_session()
    meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"{session}-mrtr"}

    async def confirm(message: str, response_type: Any, params: Any, context: Any) -> Any:
        return {}

    async with Client(ledger.server, elicitation_handler=confirm) as client:
        done = await client.call_tool_mcp("confirm_delete", {"entry": "m"}, meta=meta)
        again = await client.call_tool_mcp("confirm_delete", {"entry": "m"}, meta=meta)
    assert not done.is_error and text_of(done) == "deleted m" and not replayed(done)
    assert text_of(again) == "deleted m" and replayed(again)
    assert ledger.runs["m"] == 1


async def test_a_result_over_64_kib_is_not_run_again_and_says_so(ledger: Ledger) -> None:
    """Defect class: a retry of a call whose result was too large to keep runs it again."""
    session = new_session()
    meta = {META_SESSION_KEY: session, META_CALL_ID_KEY: f"{session}-big"}
    async with Client(ledger.server) as client:
        first = await client.call_tool_mcp("archive_all", {"label": "big"}, meta=meta)
        again = await client.call_tool_mcp("archive_all", {"label": "big"}, meta=meta)
    assert ledger.runs["big"] == 1
    assert not first.is_error and again.is_error and replayed(again)
    assert "NOT run again" in text_of(again)
    assert (again.structured_content or {})["kind"] == "result_not_kept"


async def test_the_middleware_answers_an_approval_as_the_client_supports_it(
    service: Running, ledger: Ledger
) -> None:
    """Defect class: the approval's URL never reaches the agent's user, or the model is
    handed a way to approve its own call."""
    session = new_session()
    async with Client(ledger.server) as client:
        asked = await client.call_tool_mcp("wire_money", {"amount": 5}, meta=session_only(session))
    assert asked.is_error and ledger.runs["wire-5"] == 0
    structured = asked.structured_content
    assert structured is not None and structured["kind"] == "approval_required"

    seen: list[str] = []

    async def user_opens_the_page(
        message: str, response_type: object, params: Any, context: object
    ) -> Any:
        seen.append(params.url)
        approve(service, approval_id_of(params.url))
        return mt.ElicitResult(action="accept")

    async with Client(ledger.server, elicitation_handler=user_opens_the_page) as client:
        paid = await client.call_tool_mcp("wire_money", {"amount": 7}, meta=session_only(session))
    assert not paid.is_error and ledger.runs["wire-7"] == 1
    assert len(seen) == 1


# -- the official SDK's guard ------------------------------------------------------


async def test_the_sdk_guard_runs_one_call_id_once_and_asks_for_approvals(
    service: Running,
) -> None:
    """Defect class: the SDK guard runs a retried write again, or runs a call that
    needs an approval."""
    runs: Counter[str] = Counter()
    server: MCPServer[Any] = MCPServer("sdk-ledger")

    @server.tool(annotations=mt.ToolAnnotations(destructive_hint=True))
    def delete_entry(entry: str) -> str:
        runs[entry] += 1
        return f"deleted {entry}"

    @server.tool(annotations=mt.ToolAnnotations(destructive_hint=True))
    def wire_money(amount: int) -> str:
        runs[f"wire-{amount}"] += 1
        return f"wired {amount}"

    quota = QuotaClient(QuotaClientConfig(base_url=service.url, token=SERVER_TOKEN))
    protect(server, quota)
    session = new_session()
    meta = cast(mt.RequestParamsMeta, {META_SESSION_KEY: session, META_CALL_ID_KEY: "sdk-1"})
    try:
        async with SdkClient(server) as client:
            results = [await client.call_tool("delete_entry", {"entry": "s1"}, meta=meta)]
            results += await asyncio.gather(
                *(client.call_tool("delete_entry", {"entry": "s1"}, meta=meta) for _ in range(8))
            )
            asked = await client.call_tool(
                "wire_money", {"amount": 3}, meta=cast(mt.RequestParamsMeta, session_only(session))
            )
    finally:
        await quota.aclose()
    assert runs["s1"] == 1
    assert {text_of(r) for r in results} == {"deleted s1"}
    assert [replayed(r) for r in results] == [False] + [True] * 8
    assert asked.is_error and runs["wire-3"] == 0
    assert (asked.structured_content or {})["kind"] == "approval_required"
