"""A server written by a user, started without (or with wrong) quota settings: one line.

The servers here are what a user writes after reading docs/mcp-integration.md: the
middleware at module level, no try/except around it. They run as `python server.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastmcp import FastMCP
from mcp_quota_client import QuotaConfigError
from mcp_quota_client.fastmcp import QuotaMiddleware

from tests.support import ROOT

FASTMCP_SERVER = """
from fastmcp import FastMCP
from mcp_quota_client.fastmcp import QuotaMiddleware

mcp = FastMCP("inventory")
mcp.add_middleware(QuotaMiddleware())

if __name__ == "__main__":
    mcp.run()
"""

SDK_SERVER = """
from mcp.server.mcpserver import MCPServer
from mcp_quota_client.mcp_sdk import protect

server = MCPServer("inventory")
protect(server)

if __name__ == "__main__":
    server.run()
"""

CASES = {
    "url missing": ({"MCP_QUOTA_TOKEN": "dev-server-token"}, "MCP_QUOTA_URL"),
    "token missing": ({"MCP_QUOTA_URL": "http://127.0.0.1:8000"}, "MCP_QUOTA_TOKEN"),
    "url without scheme": (
        {"MCP_QUOTA_URL": "127.0.0.1:8000", "MCP_QUOTA_TOKEN": "t"},
        "MCP_QUOTA_URL",
    ),
    "url not http": (
        {"MCP_QUOTA_URL": "ftp://quota.example", "MCP_QUOTA_TOKEN": "t"},
        "MCP_QUOTA_URL",
    ),
    "url with a space": (
        {"MCP_QUOTA_URL": "http://quota example", "MCP_QUOTA_TOKEN": "t"},
        "MCP_QUOTA_URL",
    ),
}


# Run as processes: one case of each kind (a variable missing, a value unusable). How an
# uncaught error is printed does not depend on the case; every case's message is checked
# in process below.
PROCESS_CASES = ["url missing", "url not http"]


def quota_free_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_QUOTA_")}
    return {**env, **extra}


def run(source_or_args: str | list[str], tmp_path: Path, extra: dict[str, str]) -> tuple[int, str]:
    if isinstance(source_or_args, str):
        script = tmp_path / "server.py"
        script.write_text(source_or_args)
        args = [sys.executable, str(script)]
    else:
        args = source_or_args
    done = subprocess.run(
        args,
        cwd=tmp_path,
        env=quota_free_env(extra),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,  # a generous cap on a process that should exit at once
        check=False,
    )
    return done.returncode, done.stderr + done.stdout


@pytest.mark.parametrize("server", [FASTMCP_SERVER, SDK_SERVER], ids=["fastmcp", "sdk"])
@pytest.mark.parametrize("case", PROCESS_CASES)
def test_a_users_server_prints_one_line_naming_the_variable(
    server: str, case: str, tmp_path: Path
) -> None:
    extra, variable = CASES[case]
    status, output = run(server, tmp_path, extra)
    assert status != 0
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert variable in lines[0] and "Traceback" not in output


@pytest.mark.parametrize("script", ["articles_server.py", "articles_server_sdk.py"])
@pytest.mark.parametrize("case", PROCESS_CASES)
def test_the_example_prints_one_line(script: str, case: str, tmp_path: Path) -> None:
    extra, variable = CASES[case]
    args = [sys.executable, str(ROOT / "examples" / script)]
    status, output = run(args, tmp_path, extra)
    lines = output.strip().splitlines()
    assert status == 2 and len(lines) == 1, output
    assert lines[0].startswith("mcp-quota: ") and variable in lines[0], output
    assert "Traceback" not in output


@pytest.mark.parametrize("case", list(CASES))
def test_the_middleware_raises_a_configuration_error_in_process(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra, variable = CASES[case]
    for name in list(os.environ):
        if name.startswith("MCP_QUOTA_"):
            monkeypatch.delenv(name)
    for name, value in extra.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(QuotaConfigError, match=variable) as raised:
        FastMCP("inventory").add_middleware(QuotaMiddleware())
    assert "\n" not in str(raised.value)  # printed as one line when uncaught
