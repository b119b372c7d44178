"""Fixtures for the MCP integration tests.

`FakeQuotaService` speaks the `/v1/check` contract over real HTTP on loopback, so
the client's timeouts, retries and pooling are exercised for real. It counts like
the service (per session and category, never past the limit, a repeated call_id
replayed and not counted), and can be scripted to fail: tests of the real service
live in `test_mcp_e2e.py`.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp_quota_client import QuotaClient, QuotaClientConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

TOKEN = "test-server-token"
RETRY_AFTER = 3600


@dataclass(frozen=True)
class Scripted:
    """One scripted answer: a status and body, or `hang` (count, then hold the answer)."""

    status: int = 503
    body: dict[str, Any] | None = None
    hang: bool = False


@dataclass
class Seen:
    """One request the fake received."""

    body: dict[str, Any]
    authorization: str | None
    client_port: int


@dataclass
class FakeQuotaService:
    """An in-memory `/v1/check` on a real loopback HTTP server."""

    limits: dict[str, int] = field(default_factory=lambda: {"read": 200, "write": 15})
    script: deque[Scripted] = field(default_factory=deque)
    seen: list[Seen] = field(default_factory=list)
    used: dict[tuple[str, str], int] = field(default_factory=dict)
    replies: dict[tuple[str, str], tuple[int, dict[str, Any]]] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""
    accepts_fail_open: bool = True
    """The service today answers 400 "Unknown field 'fail_open'"; the lead's change accepts it."""
    accepts_issue_22: bool = True
    """False: a service from before `units`, `refused_locally` and `args_digest`."""
    accepts_client: bool = True
    accepts_minting: bool = True
    """False: a service from before minted sessions (`mint_session`, `session_token`,
    `transport_session_id`, issue 31). This fake accepts them and mints none."""
    issues_hold_tickets: bool = True
    """A refusal with nothing left carries a `hold_ticket` ("ticket-1", "ticket-2", ...)."""
    tickets: int = 0
    """False: a service from before the `client` object (issue 20)."""

    def bodies(self) -> list[dict[str, Any]]:
        with self.lock:
            return [entry.body for entry in self.seen]

    def answer(self, body: dict[str, Any], authorization: str | None) -> tuple[int, dict[str, Any]]:
        if authorization != f"Bearer {TOKEN}":
            return 401, {"error": {"code": "unauthorized", "message": "bad token"}}
        unknown = set(body) - {
            "session_id",
            "tool",
            "category",
            "annotations",
            "principal",
            "server",
            "call_id",
            "lease",  # accepted, never granted: this fake counts one call per check
            *(["fail_open"] if self.accepts_fail_open else []),
            *(["units", "refused_locally", "args_digest"] if self.accepts_issue_22 else []),
            *(["client"] if self.accepts_client else []),
            *(
                ["mint_session", "session_token", "transport_session_id"]
                if self.accepts_minting
                else []
            ),
        }
        if unknown:
            field_name = sorted(unknown)[0]
            return 400, {
                "error": {"code": "invalid_request", "message": "unknown", "field": field_name}
            }
        session = body["session_id"]
        category = body.get("category") or (
            "read" if (body.get("annotations") or {}).get("readOnlyHint") is True else "write"
        )
        call_id = body.get("call_id")
        if call_id is not None and (session, call_id) in self.replies:
            status, reply = self.replies[(session, call_id)]
            return status, {**reply, "duplicate": True}
        limit = self.limits[category]
        used = self.used.get((session, category), 0)
        resets_at = (datetime.now(UTC) + timedelta(seconds=RETRY_AFTER)).isoformat()
        common = {
            "session_id": session,
            "tool": body["tool"],
            "category": category,
            "limit": limit,
            "resets_at": resets_at.replace("+00:00", "Z"),
            "duplicate": False,
        }
        units = int(body.get("units", 1))
        if used + units > limit:
            message = (
                f"The tool '{body['tool']}' was NOT run: session '{session}' has used its "
                f"'{category}' quota ({used}/{limit} calls). An administrator can raise it."
            )
            status, reply = (
                429,
                {
                    **common,
                    "allowed": False,
                    "used": used,
                    "remaining": max(0, limit - used),
                    "retry_after_seconds": RETRY_AFTER,
                    "error": {"code": "quota_exceeded", "scope": "session", "message": message},
                },
            )
            if self.issues_hold_tickets and used >= limit:
                self.tickets += 1
                reply["hold_ticket"] = f"ticket-{self.tickets}"
        else:
            self.used[(session, category)] = used + units
            status, reply = (
                200,
                {
                    **common,
                    "allowed": True,
                    "used": used + units,
                    "remaining": limit - used - units,
                },
            )
        if call_id is not None:
            self.replies[(session, call_id)] = (status, reply)
        return status, reply


def _handler_for(service: FakeQuotaService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes; with Nagle on, the body waits for
        # the client's delayed ACK (~40 ms) on every keep-alive request.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            return

        def _send(self, status: int, body: dict[str, Any]) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            if status in (429, 503):
                self.send_header("Retry-After", str(body.get("retry_after_seconds", 1)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._send(200, {"status": "ok"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            authorization = self.headers.get("Authorization")
            with service.lock:
                service.seen.append(Seen(body, authorization, self.client_address[1]))
                scripted = service.script.popleft() if service.script else None
                if scripted is None or scripted.hang:
                    status, reply = service.answer(body, authorization)
                else:
                    status = scripted.status
                    reply = scripted.body or {
                        "error": {"code": "store_unavailable", "message": "try later"}
                    }
            if scripted is not None and scripted.hang:
                # The call was counted; its answer is lost, as on a client timeout.
                service.release.wait(timeout=10)
                self.close_connection = True
                return
            self._send(status, reply)

    return Handler


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def quota_service() -> Iterator[FakeQuotaService]:
    service = FakeQuotaService()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(service))
    server.daemon_threads = True
    service.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield service
    finally:
        service.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def dead_url() -> str:
    """A loopback URL where nothing listens: connections are refused at once."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    port = server.server_address[1]
    server.server_close()
    return f"http://127.0.0.1:{port}"


ClientFactory = Callable[..., QuotaClient]


@pytest.fixture
async def make_client(quota_service: FakeQuotaService) -> AsyncIterator[ClientFactory]:
    """Builds clients on the fake service with no backoff delay; closes them after."""
    made: list[QuotaClient] = []

    def factory(**overrides: Any) -> QuotaClient:
        options: dict[str, Any] = {"base_url": quota_service.url, "token": TOKEN}
        options.update(overrides)
        jitter = options.pop("jitter", lambda: 0.0)
        client = QuotaClient(QuotaClientConfig(**options), jitter=jitter)
        made.append(client)
        return client

    yield factory
    for client in made:
        await client.aclose()
