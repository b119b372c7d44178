"""A client that names no session and connects once per call keeps one budget (issue 31).

MCP Inspector CLI, one process per call, no `_meta` session, through `mcp-quota-proxy`
over HTTP in front of the TypeScript tags server: the upstream's record of deletions is
the witness that exactly 15 of 20 deletes ran (main ran all 20, a session per call).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from launch import (
    SERVER_TOKEN,
    Running,
    spawn_articles_server,
    spawn_quota_service,
    wait_healthy,
)

from tests.mcp.proxy_support import deletions, inspector, spawn_proxy, spawn_tags_http

pytestmark = [pytest.mark.e2e]

CALLS = 20
WRITE_LIMIT = 15
HEALTHY_WITHIN = 120.0


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("unnamed-logs")


@pytest.fixture(scope="module")
def service(logs: Path) -> Iterator[Running]:
    running = spawn_quota_service(logs)
    try:
        wait_healthy(running, timeout=HEALTHY_WITHIN)
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def proxied(logs: Path, service: Running) -> Iterator[tuple[Running, Path]]:
    record = logs / "deletions.jsonl"
    tags = spawn_tags_http(record, logs)
    started = [tags]
    try:
        wait_healthy(tags, timeout=HEALTHY_WITHIN)
        # A name of its own: the derived session is this server's alone.
        name = f"unnamed-{uuid.uuid4().hex[:8]}"
        proxy = spawn_proxy(
            ["--upstream-url", f"{tags.url}/mcp"], service.url, SERVER_TOKEN, logs, name=name
        )
        started.append(proxy)
        wait_healthy(proxy, timeout=HEALTHY_WITHIN)
        yield proxy, record
    finally:
        for running in reversed(started):
            running.stop()


def test_the_inspector_one_process_per_call_no_session_named_deletes_15_of_20(
    proxied: tuple[Running, Path],
) -> None:
    """Defect class: a budget keyed on the connection (each call its own session)."""
    proxy, record = proxied
    prefix = uuid.uuid4().hex[:8]
    runs = [
        inspector(
            f"{proxy.url}/mcp",
            "tools/call",
            "--tool-name",
            "delete_tag",
            "--tool-arg",
            f"tag={prefix}-{i}",
        )
        for i in range(CALLS)
    ]

    ran = [e["tag"] for e in deletions(record) if e["tag"].startswith(prefix)]
    assert ran == [f"{prefix}-{i}" for i in range(WRITE_LIMIT)]
    assert [run.returncode == 0 for run in runs] == [True] * WRITE_LIMIT + [False] * (
        CALLS - WRITE_LIMIT
    )


def test_the_same_through_the_python_middleware_runs_15_of_20(service: Running, logs: Path) -> None:
    """Defect class: a budget keyed on the connection, on the FastMCP middleware's path."""
    server = spawn_articles_server(service.url, logs)
    try:
        wait_healthy(server, timeout=HEALTHY_WITHIN)
        runs = [
            inspector(
                f"{server.url}/mcp",
                "tools/call",
                "--tool-name",
                "delete_tag",
                "--tool-arg",
                f"tag=t{i}",
            )
            for i in range(CALLS)
        ]
    finally:
        server.stop()

    refused = [run.result().get("isError") is True for run in runs]
    assert refused == [False] * WRITE_LIMIT + [True] * (CALLS - WRITE_LIMIT)
