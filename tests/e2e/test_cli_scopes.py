"""The operator CLI on the principal and tenant scopes, against the service as `make run`
starts it: show, raise, suspend, resume and reset a principal; show the tenant."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.e2e.http import ADMIN_TOKEN, call
from tests.support import ROOT, running_service


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_service() as base:
        yield base


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MCP_QUOTA_URL": url, "MCP_QUOTA_ADMIN_TOKEN": ADMIN_TOKEN}
    command = [str(ROOT / ".venv" / "bin" / "mcp-quota"), *args]
    return subprocess.run(command, check=False, env=env, capture_output=True, text=True, timeout=60)


def test_principal_and_tenant_commands(url: str) -> None:
    body = {"session_id": "cli-1", "tool": "delete_tag", "principal": "cli-bot"}
    assert call(f"{url}/v1/check", "POST", body).status == 200
    shown = cli(url, "principal", "show", "cli-bot")
    assert shown.returncode == 0, shown.stderr
    assert "cli-bot" in shown.stdout and "write" in shown.stdout and "86400s" in shown.stdout
    raised = cli(
        url,
        "principal",
        "raise",
        "cli-bot",
        "--category",
        "write",
        "--add",
        "50",
        "--reason",
        "migration",
    )
    assert raised.returncode == 0 and "100 -> 150" in raised.stdout, raised.stdout
    suspended = cli(url, "principal", "suspend", "cli-bot", "--reason", "looks wrong")
    assert suspended.returncode == 0 and "suspended" in suspended.stdout
    refused = call(f"{url}/v1/check", "POST", {**body, "session_id": "cli-2"})
    assert refused.status == 429 and refused.body["error"]["code"] == "principal_suspended"
    assert cli(url, "principal", "resume", "cli-bot", "--reason", "checked").returncode == 0
    assert call(f"{url}/v1/check", "POST", {**body, "session_id": "cli-3"}).status == 200
    reset = cli(url, "principal", "reset", "cli-bot", "--reason", "new batch", "--json")
    assert reset.returncode == 0 and '"used": 0' in reset.stdout
    tenant = cli(url, "tenant", "show")
    assert tenant.returncode == 0 and "3600s" in tenant.stdout
    lowered = cli(
        url, "principal", "raise", "cli-bot", "--category", "write", "--limit", "5", "--reason", "x"
    )
    assert lowered.returncode == 5  # conflict: a raise never lowers


def test_tokens_through_the_admin_api_with_a_binding(url: str) -> None:
    created = cli(
        url,
        "token",
        "create",
        "--api",
        "--role",
        "server",
        "--name",
        "editor host",
        "--principal",
        "editor@example.com",
        "--json",
    )
    assert created.returncode == 0, created.stderr
    data = json.loads(created.stdout)
    assert data["principals"] == ["editor@example.com"] and data["token"].startswith("mcpq_")
    server = data["token"]
    body = {"session_id": "api-tok", "tool": "delete_tag", "principal": "editor@example.com"}
    assert call(f"{url}/v1/check", "POST", body, token=server).status == 200
    refused = call(f"{url}/v1/check", "POST", {**body, "principal": "bot"}, token=server)
    assert refused.status == 403 and refused.body["error"]["code"] == "principal_not_allowed"
    listed = cli(url, "token", "list", "--api")
    assert listed.returncode == 0 and data["token_id"] in listed.stdout
    assert cli(url, "token", "revoke", "--api", data["token_id"]).returncode == 0
    # Services may accept it for up to QUOTA_TOKEN_CACHE_SECONDS more; the record says so.
    revoked = json.loads(cli(url, "token", "list", "--api", "--json").stdout)["tokens"]
    [mine] = [t for t in revoked if t["token_id"] == data["token_id"]]
    assert mine["revoked_at"] is not None


def test_session_list_and_lower(url: str) -> None:
    body = {"session_id": "cli-blocked", "tool": "delete_tag", "principal": "lister"}
    for _ in range(16):
        call(f"{url}/v1/check", "POST", body)
    listed = cli(url, "session", "list", "--state", "blocked")
    assert listed.returncode == 0, listed.stderr
    assert "cli-blocked" in listed.stdout and "blocked" in listed.stdout
    raised = cli(
        url,
        "session",
        "raise",
        "cli-blocked",
        "--category",
        "write",
        "--add",
        "5",
        "--reason",
        "finish",
    )
    assert raised.returncode == 0
    lowered = cli(url, "session", "lower", "cli-blocked", "--category", "write", "--reason", "done")
    assert lowered.returncode == 0 and "20 -> 15" in lowered.stdout, lowered.stdout
