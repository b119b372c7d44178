"""Start the real pieces as a user does: the quota service (`make run`) and the example servers.

Used by `examples/demo.py` and by the end-to-end tests in `tests/mcp/`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parent.parent
SERVE_LOCAL = ROOT / "scripts" / "serve_local.py"
EXAMPLES = ROOT / "examples"
SERVER_TOKEN = "dev-server-token"
ADMIN_TOKEN = "dev-admin-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Running:
    """A started process, its base URL and where its output goes."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def wait_healthy(running: Running, timeout: float = 60.0) -> None:
    """Poll `GET /health` until it answers 200, the process dies, or time runs out.

    Raises:
        RuntimeError: the process exited or never became healthy.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            raise RuntimeError(f"{running.name} exited early:\n{running.output()}")
        try:
            if httpx2.get(f"{running.url}/health", timeout=1.0).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.05)
    running.stop()
    raise RuntimeError(f"{running.name} not healthy after {timeout}s:\n{running.output()}")


def spawn(
    name: str, command: list[str], port: int, log_dir: Path, env: Mapping[str, str]
) -> Running:
    """Start a process with its output in `log_dir`; does not wait for it."""
    log = log_dir / f"{name}-{port}.log"
    with log.open("wb") as sink:
        # The command is built here from fixed paths, never from outside input.
        process = subprocess.Popen(  # noqa: S603
            command, cwd=ROOT, env={**os.environ, **env}, stdout=sink, stderr=subprocess.STDOUT
        )
    return Running(name, f"http://127.0.0.1:{port}", process, log)


def spawn_quota_service(log_dir: Path, policy: str | None = None) -> Running:
    """`make run`: scripts/serve_local.py on a free port, embedded backend; `policy` is
    a policy file's path (default: the stage's)."""
    port = free_port()
    env = {"PORT": str(port), "PYTHONUNBUFFERED": "1"}
    if policy is not None:
        env["QUOTA_POLICY"] = policy
    return spawn("quota-service", [sys.executable, str(SERVE_LOCAL)], port, log_dir, env)


def spawn_articles_server(
    quota_url: str, log_dir: Path, script: str = "articles_server.py"
) -> Running:
    """An example MCP server over streamable HTTP on loopback, guarded by `quota_url`.

    It does not call the quota service until a tool is called, so it can start
    alongside the service.
    """
    port = free_port()
    env = {
        "MCP_QUOTA_URL": quota_url,
        "MCP_QUOTA_TOKEN": SERVER_TOKEN,
        "MCP_QUOTA_MAX_ATTEMPTS": "2",
        "PYTHONUNBUFFERED": "1",
    }
    command = [sys.executable, str(EXAMPLES / script), "--port", str(port)]
    return spawn(script.removesuffix(".py"), command, port, log_dir, env)


@contextmanager
def healthy(*processes: Running) -> Iterator[None]:
    """Wait until every process answers /health; stop them all (last first) on exit."""
    try:
        for running in processes:
            wait_healthy(running)
        yield
    finally:
        for running in reversed(processes):
            running.stop()


@contextmanager
def quota_service(log_dir: Path) -> Iterator[Running]:
    """The quota service, started and healthy."""
    service = spawn_quota_service(log_dir)
    with healthy(service):
        yield service


@contextmanager
def service_and_server(
    log_dir: Path, script: str = "articles_server.py"
) -> Iterator[tuple[Running, Running]]:
    """The quota service and an example server guarded by it, started side by side."""
    service = spawn_quota_service(log_dir)
    server = spawn_articles_server(service.url, log_dir, script)
    with healthy(service, server):
        yield service, server


@contextmanager
def articles_server(
    quota_url: str, log_dir: Path, script: str = "articles_server.py"
) -> Iterator[Running]:
    """An example server guarded by an already running quota service."""
    server = spawn_articles_server(quota_url, log_dir, script)
    with healthy(server):
        yield server
