"""Who the proxy says a call is for, what it passes upstream, and how it fails to start.

The quota service here is the loopback fake from `conftest.py`, so each test can read
exactly what the proxy asked it; the upstream is the TypeScript tags server, which
records the Authorization header each deletion arrived with.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx2
import mcp_types as mt
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp.server.auth.providers.jwt import RSAKeyPair
from joserfc.jwk import RSAKey
from launch import ROOT, Running, free_port, spawn, wait_healthy
from mcp_quota_client import META_SESSION_KEY
from mcp_quota_client import proxy as proxy_cli

from tests.mcp.conftest import TOKEN, FakeQuotaService
from tests.mcp.proxy_support import deletions, spawn_proxy, spawn_tags_http, tags_command

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]

ISSUER = "https://issuer.test"
AUDIENCE = "mcp-quota-proxy-tests"
HEALTHY_WITHIN = 120.0
PEM = "-----BEGIN PUBLIC KEY-----"


@pytest.fixture(scope="module")
def keys() -> RSAKeyPair:
    return RSAKeyPair.generate()


@pytest.fixture
def record(tmp_path: Path) -> Path:
    return tmp_path / "deletions.jsonl"


@pytest.fixture
def tags_http(record: Path, tmp_path: Path) -> Iterator[Running]:
    tags = spawn_tags_http(record, tmp_path)
    try:
        wait_healthy(tags, timeout=HEALTHY_WITHIN)
        yield tags
    finally:
        tags.stop()


def proxy(
    quota: FakeQuotaService, upstream_url: str, log_dir: Path, *extra: str
) -> Iterator[Running]:
    running = spawn_proxy(["--upstream-url", upstream_url], quota.url, TOKEN, log_dir, *extra)
    try:
        wait_healthy(running, timeout=HEALTHY_WITHIN)
        yield running
    finally:
        running.stop()


@pytest.fixture
def jwt_proxy(
    quota_service: FakeQuotaService,
    tags_http: Running,
    keys: RSAKeyPair,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[Running]:
    """A resource-server proxy: RS256 tokens from `keys`, issuer and audience checked."""
    public_key = tmp_path / "public.pem"
    public_key.write_text(keys.public_key)
    extra = getattr(request, "param", ())
    yield from proxy(
        quota_service,
        f"{tags_http.url}/mcp",
        tmp_path,
        "--jwt-public-key",
        str(public_key),
        "--jwt-issuer",
        ISSUER,
        "--jwt-audience",
        AUDIENCE,
        *extra,
    )


def token(keys: RSAKeyPair, subject: str, audience: str = AUDIENCE) -> str:
    return keys.create_token(subject=subject, issuer=ISSUER, audience=audience)


async def delete(url: str, bearer: str | None, tag: str, session: str | None = None) -> bool:
    """One delete_tag call; True when it ran."""
    meta = {META_SESSION_KEY: session} if session else None
    async with Client(url, auth=bearer) as client:
        result = await client.call_tool_mcp("delete_tag", {"tag": tag}, meta=meta)
    return not result.is_error


@pytest.mark.parametrize("jwt_proxy", [("--forward-authorization",)], indirect=True)
async def test_a_verified_token_names_the_principal_and_is_forwarded_when_asked(
    quota_service: FakeQuotaService, jwt_proxy: Running, keys: RSAKeyPair, record: Path
) -> None:
    alice, bob = token(keys, "alice"), token(keys, "bob")
    url = f"{jwt_proxy.url}/mcp"

    assert await delete(url, alice, "a1")
    assert await delete(url, bob, "b1")

    checks = [b for b in quota_service.bodies() if b["tool"] == "delete_tag"]
    assert [b.get("principal") for b in checks] == ["alice", "bob"]
    assert [(e["tag"], e["authorization"]) for e in deletions(record)] == [
        ("a1", f"Bearer {alice}"),
        ("b1", f"Bearer {bob}"),
    ]


async def test_the_tokens_oauth_client_and_the_mcp_clients_name_go_with_each_check(
    quota_service: FakeQuotaService, jwt_proxy: Running, keys: RSAKeyPair
) -> None:
    with_client = keys.create_token(
        subject="alice",
        issuer=ISSUER,
        audience=AUDIENCE,
        additional_claims={"client_id": "agent-app"},
    )
    url = f"{jwt_proxy.url}/mcp"
    claude = mt.Implementation(name="claude-code", version="1.0.71")
    async with Client(url, auth=with_client, client_info=claude) as client:
        assert not (await client.call_tool_mcp("delete_tag", {"tag": "c1"})).is_error
    assert await delete(url, token(keys, "bob"), "c2")  # no client claim: none is named

    clients = [b.get("client", {}) for b in quota_service.bodies() if b["tool"] == "delete_tag"]
    assert clients[0] == {
        "name": "claude-code",
        "version": "1.0.71",
        "oauth_client_id": "agent-app",
    }
    assert "oauth_client_id" not in clients[1]


async def test_without_a_valid_token_nothing_reaches_the_service_or_the_upstream(
    quota_service: FakeQuotaService, jwt_proxy: Running, keys: RSAKeyPair, record: Path
) -> None:
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    headers = {"Accept": "application/json, text/event-stream"}
    wrong_audience = token(keys, "mallory", audience="someone-else")
    async with httpx2.AsyncClient(timeout=60) as http:
        anonymous = await http.post(f"{jwt_proxy.url}/mcp", json=initialize, headers=headers)
        forged = await http.post(
            f"{jwt_proxy.url}/mcp",
            json=initialize,
            headers={**headers, "Authorization": f"Bearer {wrong_audience}"},
        )

    assert (anonymous.status_code, forged.status_code) == (401, 401)
    assert quota_service.bodies() == []
    assert deletions(record) == []


@pytest.mark.parametrize("jwt_proxy", [("--keying", "principal")], indirect=True)
async def test_principal_keying_gives_each_subject_one_budget_across_sessions(
    quota_service: FakeQuotaService, jwt_proxy: Running, keys: RSAKeyPair, record: Path
) -> None:
    quota_service.limits["write"] = 2
    alice, bob = token(keys, "alice"), token(keys, "bob")
    url = f"{jwt_proxy.url}/mcp"

    # A new client-chosen session per call: ignored, the budget is alice's.
    ran = [await delete(url, alice, f"a{i}", session=uuid.uuid4().hex) for i in range(3)]
    assert ran == [True, True, False]
    assert await delete(url, bob, "b0")

    sessions = {b["session_id"] for b in quota_service.bodies() if b.get("principal") == "alice"}
    assert sessions == {"principal:alice"}
    # Not asked to forward it: the upstream never saw a caller's token.
    assert [(e["tag"], e["authorization"]) for e in deletions(record)] == [
        ("a0", None),
        ("a1", None),
        ("b0", None),
    ]


async def test_without_auth_the_middlewares_derived_keys_apply_and_nothing_is_forwarded(
    quota_service: FakeQuotaService, tags_http: Running, record: Path, tmp_path: Path
) -> None:
    quota_service.limits["write"] = 2
    for running in proxy(quota_service, f"{tags_http.url}/mcp", tmp_path):
        url = f"{running.url}/mcp"
        # The caller sends a token; with no --jwt-* the proxy neither checks nor passes it.
        ran = [await delete(url, "callers-own-token", f"t{i}") for i in range(3)]

    assert ran == [True, True, False]
    checks = [b for b in quota_service.bodies() if b["tool"] == "delete_tag"]
    assert all(b["session_id"].startswith("derived:") for b in checks)
    assert all("principal" not in b for b in checks)
    assert [e["authorization"] for e in deletions(record)] == [None, None]


@pytest.mark.parametrize(
    ("extra", "server"), [((), "tags"), (("--name", "shop tags"), "shop tags")]
)
async def test_every_check_names_the_server_the_upstreams_own_name_or_name(
    quota_service: FakeQuotaService,
    tags_http: Running,
    tmp_path: Path,
    extra: tuple[str, ...],
    server: str,
) -> None:
    for running in proxy(quota_service, f"{tags_http.url}/mcp", tmp_path, *extra):
        url = f"{running.url}/mcp"
        async with Client(url) as client:
            await client.call_tool_mcp("list_deletions", {})
            await client.call_tool_mcp("delete_tag", {"tag": "a"})
        assert await delete(url, None, "b", session="another-session")

    checks = quota_service.bodies()
    assert [b["tool"] for b in checks] == ["list_deletions", "delete_tag", "delete_tag"]
    assert [b.get("server") for b in checks] == [server] * 3


async def test_an_http_upstream_is_called_over_one_kept_alive_connection(
    quota_service: FakeQuotaService, tags_http: Running, record: Path, tmp_path: Path
) -> None:
    # The SDK's client closes an SSE answer before its end; unless the proxy reads
    # that end, every call pays a TCP connection of its own (bench/proxy_overhead.py).
    for running in proxy(quota_service, f"{tags_http.url}/mcp", tmp_path):
        url = f"{running.url}/mcp"
        async with Client(url) as client:
            for i in range(5):
                result = await client.call_tool_mcp("delete_tag", {"tag": f"k{i}"})
                assert not result.is_error

    connections = {e["connection"] for e in deletions(record)}
    assert len(deletions(record)) == 5
    assert len(connections) == 1


def stdio_proxy(quota_service: FakeQuotaService, record: Path) -> StdioTransport:
    """`mcp-quota-proxy --stdio` in front of the tags server over stdio, as an agent runs it."""
    env = {
        **os.environ,
        "MCP_QUOTA_URL": quota_service.url,
        "MCP_QUOTA_TOKEN": TOKEN,
        "PYTHONUNBUFFERED": "1",
    }
    upstream = shlex.join(tags_command(record))
    args = ["-m", "mcp_quota_client.proxy", "--stdio", "--upstream-command", upstream]
    return StdioTransport(sys.executable, args, env=env, cwd=str(ROOT), keep_alive=False)


async def test_over_stdio_the_proxy_is_a_command_an_agent_starts(
    quota_service: FakeQuotaService, record: Path
) -> None:
    async with Client(stdio_proxy(quota_service, record)) as client:
        results = [await client.call_tool_mcp("delete_tag", {"tag": f"s{i}"}) for i in range(17)]
        name = client.server_info.name if client.server_info else None

    assert [r.is_error for r in results] == [False] * 15 + [True] * 2
    assert [e["tag"] for e in deletions(record)] == [f"s{i}" for i in range(15)]
    # One upstream process for the life of the proxy: every caller shares it.
    assert len({e["pid"] for e in deletions(record)}) == 1
    assert name == "tags"
    checks = [b for b in quota_service.bodies() if b["tool"] == "delete_tag"]
    assert len({b["session_id"] for b in checks}) == 1


async def test_over_stdio_a_message_far_larger_than_a_pipe_buffer_passes_both_ways(
    quota_service: FakeQuotaService, record: Path
) -> None:
    # The proxy reads its stdin and writes its stdout on the event loop, not line by
    # line in a thread as the SDK does: a 1 MB line in, and the upstream's echo out.
    tag = "t" * 1_000_000
    async with Client(stdio_proxy(quota_service, record)) as client:
        result = await client.call_tool_mcp("delete_tag", {"tag": tag})

    assert result.is_error is False
    assert result.structured_content == {"deleted": tag}
    assert [e["tag"] for e in deletions(record)] == [tag]


def run_proxy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcp_quota_client.proxy", *args],
        env=env if env is not None else dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def quota_env() -> dict[str, str]:
    return {**os.environ, "MCP_QUOTA_URL": "http://127.0.0.1:9", "MCP_QUOTA_TOKEN": TOKEN}


@dataclass(frozen=True)
class Stopped:
    """How the proxy's `main` stopped: its exit code and what it wrote on stderr."""

    returncode: int | str | None
    stderr: str


@pytest.fixture
def proxy_main(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Stopped]:
    """The proxy's command line run in this process (the same `main` the console script
    calls): the argument checks need no new interpreter, which costs seconds each. The
    process boundary itself is held by the subprocess tests beside these."""

    def run(*args: str, url: str = "http://127.0.0.1:9") -> Stopped:
        monkeypatch.setenv("MCP_QUOTA_URL", url)
        monkeypatch.setenv("MCP_QUOTA_TOKEN", TOKEN)
        capsys.readouterr()
        with pytest.raises(SystemExit) as stopped:
            proxy_cli.main(list(args))
        return Stopped(stopped.value.code, capsys.readouterr().err)

    return run


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--stdio", "--upstream-url", "http://x/mcp", "--jwt-public-key", PEM], "--stdio"),
        (["--upstream-command", "node s.mjs", "--forward-authorization"], "--upstream-url"),
        (["--upstream-url", "http://x/mcp", "--jwt-issuer", "i"], "--jwt-public-key"),
        (["--upstream-url", "http://x/mcp", "--category", "delete_tag"], "TOOL=CATEGORY"),
        (["--upstream-url", "http://x/mcp", "--jwt-public-key", "/no/such.pem"], "cannot read"),
    ],
)
def test_a_bad_command_line_is_refused_in_one_line(
    args: list[str], says: str, proxy_main: Callable[..., Stopped]
) -> None:
    done = proxy_main(*args)

    assert done.returncode == 2
    assert says in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr


def test_an_unreachable_upstream_or_missing_settings_stop_it_in_one_line() -> None:
    dead = f"http://127.0.0.1:{free_port()}/mcp"
    unreachable = run_proxy("--upstream-url", dead, "--port", str(free_port()), env=quota_env())
    no_url = {k: v for k, v in os.environ.items() if not k.startswith("MCP_QUOTA_")}
    unset = run_proxy("--upstream-url", dead, env=no_url)

    assert unreachable.returncode == 2
    [line] = unreachable.stderr.strip().splitlines()
    assert line.startswith(f"mcp-quota-proxy: could not connect to the upstream {dead}")
    assert unset.returncode == 2
    [line] = unset.stderr.strip().splitlines()
    assert line.startswith("mcp-quota: MCP_QUOTA_URL is not set")


@pytest.mark.parametrize(
    ("url", "upstream"),
    [
        ("ftp://quota.example", "--upstream-url"),
        ("127.0.0.1:8000", "--upstream-url"),
        ("http://", "--upstream-command"),
    ],
)
def test_an_unusable_quota_url_stops_it_before_the_upstream_in_one_line(
    url: str, upstream: str, tmp_path: Path, proxy_main: Callable[..., Stopped]
) -> None:
    # The upstream would answer: the proxy must not start serving with checks that
    # can never reach the service (every read would run uncounted, every write fail).
    started = tmp_path / "started"
    command = f"{sys.executable} -c \"open({str(started)!r}, 'w')\""
    target = f"http://127.0.0.1:{free_port()}/mcp" if upstream == "--upstream-url" else command
    done = proxy_main(upstream, target, url=url)

    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"mcp-quota: MCP_QUOTA_URL={url!r} is not usable")
    assert not started.exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "--upstream-command or --upstream-url is required"),
        (["--upstream-url", "http://x/mcp", "--upstream-command", "node s.mjs"], "not allowed"),
        (["--upstream-command", ""], "--upstream-command is empty"),
        (["--upstream-url", "ftp://x/mcp"], "--upstream-url 'ftp://x/mcp' is not usable"),
        (["--upstream-url", "x:9000/mcp"], "--upstream-url 'x:9000/mcp' is not usable"),
    ],
)
def test_missing_or_contradictory_upstream_flags_are_one_line(
    args: list[str], says: str, proxy_main: Callable[..., Stopped]
) -> None:
    done = proxy_main(*args)

    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("mcp-quota-proxy: error: ")
    assert says in line


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "mcp-quota-proxy"
    done = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=120, check=False
    )

    assert done.returncode == 0
    assert "--upstream-command" in done.stdout


async def test_an_http_upstream_that_restarts_is_reconnected(
    quota_service: FakeQuotaService, record: Path, tmp_path: Path
) -> None:
    # The proxy holds one session with an HTTP upstream; a call made while the
    # upstream is down fails, and the next call opens a new session.
    port = free_port()
    command = tags_command(record, "--port", str(port))
    upstream = spawn("tags-first", command, port, tmp_path, {})
    wait_healthy(upstream, timeout=HEALTHY_WITHIN)
    outcomes: list[bool] = []
    try:
        for running in proxy(quota_service, f"{upstream.url}/mcp", tmp_path):
            url = f"{running.url}/mcp"
            outcomes.append(await delete(url, None, "before"))
            upstream.stop()
            outcomes.append(await delete(url, None, "while-down"))
            upstream = spawn("tags-second", command, port, tmp_path, {})
            wait_healthy(upstream, timeout=HEALTHY_WITHIN)
            outcomes.append(await delete(url, None, "after"))
    finally:
        upstream.stop()

    assert outcomes == [True, False, True]
    assert [e["tag"] for e in deletions(record)] == ["before", "after"]


async def test_a_stdio_upstream_that_exits_is_started_again(
    quota_service: FakeQuotaService, record: Path, tmp_path: Path
) -> None:
    upstream = ["--upstream-command", shlex.join(tags_command(record))]
    running = spawn_proxy(upstream, quota_service.url, TOKEN, tmp_path)
    try:
        wait_healthy(running, timeout=HEALTHY_WITHIN)
        url = f"{running.url}/mcp"
        assert await delete(url, None, "first")
        [first] = deletions(record)
        # The upstream dies (a crash, an OOM kill): the proxy's own child process.
        os.kill(first["pid"], signal.SIGKILL)
        # At most the call that finds it dead fails; a later one runs on a new process.
        ran = [await delete(url, None, f"again-{i}") for i in range(3)]
    finally:
        running.stop()

    assert ran[-1] is True
    pids = [entry["pid"] for entry in deletions(record)]
    assert pids[0] == first["pid"]
    assert len(set(pids[1:])) == 1
    assert pids[1] != first["pid"]


@pytest.fixture
def jwks_url(keys: RSAKeyPair) -> Iterator[str]:
    """An identity provider's JWKS endpoint on loopback, publishing `keys` as kid k1."""
    jwk = {**RSAKey.import_key(keys.public_key).as_dict(), "kid": "k1", "use": "sig"}
    body = json.dumps({"keys": [jwk]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


async def test_tokens_are_verified_against_a_jwks_url(
    quota_service: FakeQuotaService,
    tags_http: Running,
    keys: RSAKeyPair,
    jwks_url: str,
    tmp_path: Path,
) -> None:
    extra = ["--jwt-jwks-url", jwks_url, "--jwt-issuer", ISSUER, "--jwt-audience", AUDIENCE]
    carol = keys.create_token(subject="carol", issuer=ISSUER, audience=AUDIENCE, kid="k1")
    stranger = RSAKeyPair.generate().create_token(
        subject="carol", issuer=ISSUER, audience=AUDIENCE, kid="k1"
    )
    for running in proxy(quota_service, f"{tags_http.url}/mcp", tmp_path, *extra):
        url = f"{running.url}/mcp"
        assert await delete(url, carol, "c1")
        async with httpx2.AsyncClient(timeout=60) as http:
            forged = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                headers={
                    "Accept": "application/json, text/event-stream",
                    "Authorization": f"Bearer {stranger}",
                },
            )

    assert forged.status_code == 401
    assert [b.get("principal") for b in quota_service.bodies()] == ["carol"]
