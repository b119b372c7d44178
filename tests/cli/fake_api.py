"""A real HTTP server in a thread that answers like the admin API and records requests.

Each test queues the answers it needs (shaped as the admin API contract says); the server
records exactly what the CLI sent, so tests assert the method, raw path, query, headers
and body, and how the CLI renders the answer and maps its status.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NO_ROUTE = {"error": {"code": "not_found", "message": "No such route in the fake."}}


@dataclass(frozen=True)
class Recorded:
    """One request as the server received it; `path` is still percent-encoded."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    """One queued answer: JSON (or raw bytes), a status and extra headers."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None


class FakeAdminApi:
    """Route table of queued replies plus the log of received requests."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._replies: dict[tuple[str, str], list[Reply]] = {}
        self._lock = threading.Lock()
        self.url = ""

    def reply(
        self,
        method: str,
        path: str,
        status: int,
        body: Any,
        headers: dict[str, str] | None = None,
        hold: threading.Event | None = None,
    ) -> None:
        """Queue an answer for `method path`; the last queued answer repeats."""
        with self._lock:
            queue = self._replies.setdefault((method, path), [])
            queue.append(Reply(status, body, headers or {}, hold))

    def _take(self, method: str, path: str) -> Reply:
        with self._lock:
            queue = self._replies.get((method, path))
            if not queue:
                return Reply(404, NO_ROUTE)
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        split = urllib.parse.urlsplit(handler.path)
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with self._lock:
            self.requests.append(
                Recorded(
                    handler.command,
                    split.path,
                    urllib.parse.parse_qs(split.query),
                    {k.lower(): v for k, v in handler.headers.items()},
                    body,
                )
            )
        reply = self._take(handler.command, split.path)
        if reply.hold is not None:
            reply.hold.wait(timeout=10)
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        handler.send_response(reply.status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)


def _handler_for(api: FakeAdminApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            api.handle(self)

        def do_POST(self) -> None:
            api.handle(self)

        def do_DELETE(self) -> None:
            api.handle(self)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@contextmanager
def running_fake() -> Iterator[FakeAdminApi]:
    """Serve a FakeAdminApi on a free loopback port for the duration of the block."""
    api = FakeAdminApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(api))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    api.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield api
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def session_view(session_id: str = "sess-1", **overrides: Any) -> dict[str, Any]:
    """A session as `GET /v1/sessions/{id}` returns it: write exhausted, one blocked call."""
    view: dict[str, Any] = {
        "tenant": "demo",
        "session_id": session_id,
        "state": "active",
        "principal": "alice@example.com",
        "started_at": "2026-12-02T11:00:00Z",
        "last_seen_at": "2026-12-02T11:59:00Z",
        "resets_at": "2026-12-02T12:59:00Z",
        "suspended_reason": None,
        "categories": {
            "read": {
                "used": 12,
                "leased": 10,
                "limit": 200,
                "base_limit": 200,
                "raised_limit": None,
                "remaining": 188,
            },
            "write": {
                "used": 15,
                "limit": 15,
                "base_limit": 15,
                "raised_limit": None,
                "remaining": 0,
                "refused": 1,
            },
        },
        "last_calls": [
            {
                "at": "2026-12-02T11:58:59Z",
                "tool": "delete_article",
                "category": "write",
                "allowed": True,
                "call_id": "c-15",
            },
            {
                "at": "2026-12-02T11:59:00Z",
                "tool": "delete_article",
                "category": "write",
                "allowed": False,
                "call_id": "c-16",
                "principal": "alice@example.com",
            },
        ],
    }
    view.update(overrides)
    return view


def grant(grant_id: str = "g-1", **overrides: Any) -> dict[str, Any]:
    """A grant as the grants endpoints return it."""
    body: dict[str, Any] = {
        "grant_id": grant_id,
        "principal": "migration-bot",
        "category": "write",
        "limit": 500,
        "starts_at": "2026-12-01T09:00:00Z",
        "ends_at": "2026-12-01T17:00:00Z",
        "reason": "content migration",
        "created_by": "dev-admin",
        "created_at": "2026-11-30T10:00:00Z",
    }
    body.update(overrides)
    return body


def error(code: str, message: str, field_name: str | None = None) -> dict[str, Any]:
    """An error body as every admin endpoint returns it."""
    detail: dict[str, Any] = {"code": code, "message": message}
    if field_name is not None:
        detail["field"] = field_name
    return {"error": detail}
