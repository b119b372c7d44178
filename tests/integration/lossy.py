"""A proxy in front of a real DynamoDB server that applies a write and loses its answer:
the request reaches the store, which applies it, and the connection is then closed with
no response, as a stall or a timeout leaves it. botocore sends the same request again."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

# Which requests lose their first answer: (X-Amz-Target, body) -> lose it?
Chooser = Callable[[str, dict[str, object]], bool]


def session_writes(target: str, body: dict[str, object]) -> bool:
    """Every write to a session's item (the ones that touch its last calls)."""
    names = body.get("ExpressionAttributeNames")
    return target.endswith(".UpdateItem") and isinstance(names, dict) and "#ids" in names


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, upstream: str, choose: Chooser) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.choose = choose
        self.seen: set[bytes] = set()
        self.lost = 0
        self.lock = threading.Lock()

    def losing(self, target: str, raw: bytes) -> bool:
        """Whether this request's answer is lost: chosen, and its first time (botocore's
        retry sends the very same bytes, and gets its answer)."""
        if not target.startswith("DynamoDB_"):
            return False  # SNS, SQS: form-encoded, never lost
        if not self.choose(target, json.loads(raw or b"{}")):
            return False
        with self.lock:
            if raw in self.seen:
                return False
            self.seen.add(raw)
            self.lost += 1
            return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in one write: two small ones wait ~40 ms each on the
    # client's delayed ACK (Nagle), which made every request through the proxy slow.
    wbufsize = 1 << 16
    server: _Server

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in {"connection"}}
        upstream.request("POST", self.path, body=raw, headers=headers)
        answer = upstream.getresponse()
        data = answer.read()
        upstream.close()
        if self.server.losing(self.headers.get("X-Amz-Target", ""), raw):
            self.close_connection = True  # applied upstream; the caller hears nothing
            return
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in {"connection", "transfer-encoding", "content-length"}:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


@contextmanager
def lossy_proxy(upstream: str, choose: Chooser = session_writes) -> Iterator[_Server]:
    """A proxy to `upstream` on 127.0.0.1 (its URL: `endpoint(server)`)."""
    server = _Server(upstream, choose)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def endpoint(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"
