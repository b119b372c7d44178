"""Shared test helpers: a settable clock, backends, and a dynalite server."""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import BaseWSGIServer

from admin_cli.provision import create_tables
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import RefusalReason
from chalicelib.settings import Settings
from chalicelib.storage.dynamodb.audit import AuditStore
from chalicelib.storage.dynamodb.budgets import BudgetStore
from chalicelib.storage.dynamodb.counters import CounterStore
from chalicelib.storage.dynamodb.grants import GrantStore
from chalicelib.storage.dynamodb.tokens import TokenStore
from chalicelib.storage.dynamodb.trouble import TroubleStore
from chalicelib.storage.memory.audit import MemoryAuditLog
from chalicelib.storage.memory.records import MemoryBudgets, MemoryCounters
from chalicelib.storage.memory.tables import MemoryGrants, MemoryTokens, MemoryTroubleIndex
from chalicelib.storage.ports import (
    AuditLog,
    BudgetCounters,
    GrantRepository,
    SessionCounters,
    TokenRepository,
    TroubleIndex,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

ROOT = Path(__file__).resolve().parent.parent
DYNALITE = ROOT / "node_modules" / "dynalite" / "cli.js"
T0 = 1_796_212_800_000  # 2026-12-02T12:00:00Z, epoch ms
HOUR_MS = 3_600_000


def spent_write(session_id: str = "s1", **fields: object) -> Refused:
    """A write refused at its session's limit (15/15) at T0, resetting an hour later;
    `fields` replace any of it."""
    refused = Refused(
        session_id=session_id,
        tool="delete_tag",
        category="write",
        used=15,
        limit=15,
        now_ms=T0,
        resets_at_ms=T0 + HOUR_MS,
        reason=RefusalReason.QUOTA_EXCEEDED,
    )
    return replace(refused, **fields)  # type: ignore[arg-type]


class FixedClock:
    """A clock the test moves by hand."""

    def __init__(self, now_ms: int = T0) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, seconds: float) -> None:
        self.now_ms += int(seconds * 1000)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on port {port} after {timeout}s")


@contextmanager
def serialised_moto() -> Iterator[str]:
    """moto's DynamoDB over HTTP as `make run` serves it: one request at a time (moto's
    own threaded server is not atomic under concurrent conditional writes; DynamoDB is)."""
    app = DomainDispatcherApplication(create_backend_app)
    server = BaseWSGIServer("127.0.0.1", free_port(), app)
    server.request_queue_size = 128  # a burst of 64 concurrent checks waits its turn
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def dynalite_server() -> Iterator[str]:
    """Run dynalite (in memory) on a free loopback port; yields its endpoint URL."""
    with dynalite_process() as (endpoint, _):
        yield endpoint


@contextmanager
def dynalite_process() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run dynalite of this test's own; yields its endpoint URL and its process (for a
    test that freezes the store with SIGSTOP)."""
    node = shutil.which("node")
    if node is None or not DYNALITE.exists():
        raise RuntimeError("dynalite is not installed: run `make install` (npm ci)")
    port = free_port()
    proc = subprocess.Popen(
        [
            node,
            str(DYNALITE),
            "--port",
            str(port),
            "--createTableMs",
            "0",
            "--deleteTableMs",
            "0",
            "--updateTableMs",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.send_signal(signal.SIGCONT)  # a stopped process does not act on SIGTERM
        proc.terminate()
        proc.wait(timeout=10)


def client_for(endpoint: str | None, pool: int = 10, base: Config | None = None) -> DynamoDBClient:
    """A DynamoDB client on `endpoint` (None: moto in-process); `base` is a client
    configuration to start from (the service's `aws.CLIENT_CONFIG`, say)."""
    config = (base or Config(retries={"max_attempts": 2, "mode": "standard"})).merge(
        Config(max_pool_connections=pool)
    )
    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", config=config)


def fresh_settings(prefix: str, **overrides: object) -> Settings:
    """Settings with table names unique to one test."""
    base = Settings.from_env({})
    settings = replace(
        base,
        stage="local",
        dev_tokens=True,  # the tests speak as the fixed development tokens
        counters_table=f"{prefix}-counters",
        tokens_table=f"{prefix}-tokens",
        audit_table=f"{prefix}-audit",
        grants_table=f"{prefix}-grants",
        token_cache_seconds=0,
    )
    return replace(settings, **overrides)  # type: ignore[arg-type]


def provisioned(client: DynamoDBClient, settings: Settings) -> Settings:
    create_tables(client, settings, poll_seconds=0.02)
    return settings


@dataclass(frozen=True)
class Backend:
    """A DynamoDB implementation with this test's tables."""

    name: str
    client: DynamoDBClient
    settings: Settings


@dataclass(frozen=True)
class Stores:
    """The storage ports on one backend, with this test's tables (or memory)."""

    name: str
    counters: SessionCounters
    audit: AuditLog
    grants: GrantRepository
    tokens: TokenRepository
    keeping: Callable[[int], SessionCounters]  # counters keeping that many last calls
    budgets: BudgetCounters
    trouble: TroubleIndex


def memory_stores(categories: Iterable[str]) -> Stores:
    """Every port in this process's memory."""
    cats = tuple(categories)

    def keeping(keep: int) -> SessionCounters:
        return MemoryCounters(cats, keep)

    return Stores(
        "memory",
        keeping(10),
        MemoryAuditLog(),
        MemoryGrants(),
        MemoryTokens(),
        keeping,
        MemoryBudgets(),
        MemoryTroubleIndex(),
    )


def dynamodb_stores(backend: Backend, categories: Iterable[str]) -> Stores:
    """Every port on a DynamoDB implementation's tables."""
    cats, client, settings = tuple(categories), backend.client, backend.settings

    def keeping(keep: int) -> SessionCounters:
        return CounterStore(client, settings.counters_table, cats, keep)

    return Stores(
        backend.name,
        keeping(10),
        AuditStore(client, settings.audit_table),
        GrantStore(client, settings.grants_table),
        TokenStore(client, settings.tokens_table),
        keeping,
        BudgetStore(client, settings.counters_table),
        TroubleStore(client, settings.audit_table),
    )


def share_botocore_data() -> None:
    """One botocore data loader per process, not one per session.

    moto's `mock_aws()` gives every test a new default boto3 session, and each new session
    parses botocore's endpoint and service JSON again: about 0.3 s of every API and moto
    test. The data is read-only (botocore already shares it between one session's
    clients), so sharing it between sessions changes nothing a test observes.
    """
    botocore.session.create_loader = functools.cache(botocore.loaders.create_loader)


def fake_aws_env() -> None:
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
        }
    )
    os.environ.pop("AWS_ENDPOINT_URL", None)
    os.environ.pop("AWS_PROFILE", None)


@contextmanager
def running_service(extra_env: dict[str, str] | None = None) -> Iterator[str]:
    """Start the service exactly as `make run` does; yields its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUOTA_")}
    env.pop("AWS_ENDPOINT_URL", None)
    env.update({"PORT": str(port), **(extra_env or {})})
    log = tempfile.TemporaryFile()  # noqa: SIM115 - a pipe nobody reads would block the server
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "scripts" / "serve_local.py")],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        try:
            wait_for_port(port, timeout=60)
        except TimeoutError:
            log.seek(0)
            raise TimeoutError(log.read().decode(errors="replace")[-3000:]) from None
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def issue28_policy(suspend_after: int = 10, tenant_limit: int = 1000) -> dict[str, Any]:
    """The small policy issue 28's reproductions use: 5 writes a session, a principal's
    8 a day, `suspend_after` refusals in a row suspend (a policy document)."""
    return {
        "version": 1,
        "categories": {
            "read": {"limit": 200},
            "write": {
                "limit": 5,
                "principal": {"limit": 8, "window": "24h"},
                "tenant": {"limit": tenant_limit, "window": "1h"},
            },
        },
        "suspend_after_refusals": suspend_after,
        "rules": [{"tools": ["delete_tag"], "category": "write"}],
    }
