"""Start the proxy's pieces as a user does: the TypeScript tags server and `mcp-quota-proxy`.

Used by `tests/mcp/test_proxy*.py` and `bench/proxy_overhead.py`. Every prerequisite
(node, the npm packages) is checked here and a missing one is an error that says what
to run, never a skip: `make install` brings them all.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launch import ROOT, Running, free_port, spawn

TAGS_SERVER = Path(__file__).resolve().parent / "servers" / "tags_server.mjs"
NODE_MODULES = ROOT / "node_modules"
INSPECTOR_PACKAGE = "@modelcontextprotocol/inspector"
INSPECTOR_TIMEOUT = 180.0
"""Seconds one Inspector CLI process may take: node starts slowly on a loaded machine."""


class MissingPrerequisiteError(RuntimeError):
    """Node or an npm package the proxy tests need is not installed."""


def node() -> str:
    """The `node` executable.

    Raises:
        MissingPrerequisiteError: node is not on PATH.
    """
    found = shutil.which("node")
    if found is None:
        raise MissingPrerequisiteError("node is not on PATH: install Node.js 20+")
    return found


def npx() -> str:
    """The `npx` executable, with the npm packages the tests use installed.

    Raises:
        MissingPrerequisiteError: npx, the TypeScript SDK or the Inspector is missing.
    """
    found = shutil.which("npx")
    if found is None:
        raise MissingPrerequisiteError("npx is not on PATH: install Node.js 20+ with npm")
    for package in ("@modelcontextprotocol/sdk", INSPECTOR_PACKAGE, "zod"):
        if not (NODE_MODULES / package / "package.json").exists():
            raise MissingPrerequisiteError(f"npm package {package} is missing: run make install")
    return found


def tags_command(record: Path, *extra: str) -> list[str]:
    """The command line of the TypeScript tags server over stdio."""
    npx()  # the server imports the SDK from node_modules
    return [node(), str(TAGS_SERVER), "--record", str(record), *extra]


def spawn_tags_http(record: Path, log_dir: Path) -> Running:
    """The tags server over streamable HTTP on loopback (`/mcp`, `/health`)."""
    port = free_port()
    command = tags_command(record, "--port", str(port))
    return spawn("tags-http", command, port, log_dir, {})


def spawn_proxy(
    upstream: Sequence[str],
    quota_url: str,
    token: str,
    log_dir: Path,
    *extra: str,
    name: str = "proxy",
    env: Mapping[str, str] | None = None,
) -> Running:
    """`python -m mcp_quota_client.proxy` over HTTP in front of `upstream`.

    `upstream` is `["--upstream-command", cmd]` or `["--upstream-url", url]`; `env`
    adds to (or overrides) the quota settings given here.
    """
    port = free_port()
    settings = {
        "MCP_QUOTA_URL": quota_url,
        "MCP_QUOTA_TOKEN": token,
        "MCP_QUOTA_MAX_ATTEMPTS": "2",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    command = [
        sys.executable,
        "-m",
        "mcp_quota_client.proxy",
        "--port",
        str(port),
        *upstream,
        *extra,
    ]
    return spawn(name, command, port, log_dir, settings)


def deletions(record: Path) -> list[dict[str, Any]]:
    """The upstream's own record: one entry per tag it really deleted."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line]


@dataclass(frozen=True)
class InspectorRun:
    """One `npx @modelcontextprotocol/inspector --cli` process and what it printed."""

    returncode: int
    stdout: str
    stderr: str

    def result(self) -> dict[str, Any]:
        """The JSON result the CLI printed (a tool result for `tools/call`)."""
        parsed: dict[str, Any] = json.loads(self.stdout)
        return parsed


def inspector_bin() -> str:
    """The Inspector's own `mcp-inspector` executable script, as npx would run it (what
    npx adds is its package resolution: 0.65 s a process, 80 processes in the suite)."""
    npx()  # the package is installed
    package = NODE_MODULES / INSPECTOR_PACKAGE
    bins: dict[str, str] = json.loads((package / "package.json").read_text())["bin"]
    return str(package / bins["mcp-inspector"])


def inspector(
    url: str,
    method: str,
    *args: str,
    headers: Mapping[str, str] | None = None,
) -> InspectorRun:
    """Run the MCP Inspector CLI once against `url` (one process, one connection)."""
    command = [node(), inspector_bin(), "--cli", url, "--method", method]
    for key, value in (headers or {}).items():
        command += ["--header", f"{key}: {value}"]
    done = subprocess.run(
        [*command, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=INSPECTOR_TIMEOUT,
        check=False,
    )
    return InspectorRun(done.returncode, done.stdout, done.stderr)
