"""A DynamoDB endpoint for end-to-end tests that throttles chosen writes: an HTTP proxy
in front of dynalite, run in a thread of the test process.

Every request is forwarded unchanged, except while a budget is armed: an UpdateItem of
that budget's item is answered with DynamoDB's throttling error and never forwarded, as
DynamoDB refuses a throttled request before applying it. The service's own botocore
retries of it are throttled too, so the store fails as a step of a check sees it fail.
"""

from __future__ import annotations

import http.client
import json
import threading
import uuid
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from chalicelib.quota.core import BudgetKey

# The budget adapter's own key encoding: the proxy never restates the key format.
from chalicelib.storage.dynamodb.budget_items import item_key as budget_item_key

UPDATE_ITEM = "DynamoDB_20120810.UpdateItem"
THROTTLED = json.dumps(
    {
        "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
        "message": "Rate of requests exceeds the allowed throughput.",
    }
).encode()
# Each hop frames its own messages: the proxy sends every request and answer whole.
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}
)


class FaultyStore:
    """The proxy's state: where it listens and which budget's writes are throttled."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        if parts.hostname is None or parts.port is None:
            raise ValueError(f"upstream needs a host and a port: {upstream!r}")
        self.upstream = (parts.hostname, parts.port)
        self._lock = threading.Lock()
        self._armed: BudgetKey | None = None
        self._throttled: list[BudgetKey] = []
        self._server = _Server(self)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def throttled(self) -> list[BudgetKey]:
        """The budgets of every write refused so far, in order."""
        with self._lock:
            return list(self._throttled)

    @contextmanager
    def throttling(self, budget: BudgetKey) -> Iterator[None]:
        """Throttle every UpdateItem of `budget`'s item until the block ends."""
        with self._lock:
            self._armed = budget
        try:
            yield
        finally:
            with self._lock:
                self._armed = None

    def refuses(self, target: str, body: bytes) -> bool:
        """Whether this request is throttled (and noted as such)."""
        if target != UPDATE_ITEM:
            return False
        with self._lock:
            armed = self._armed
            if armed is None or json.loads(body).get("Key") != budget_item_key(armed):
                return False
            self._throttled.append(armed)
            return True

    def serve(self) -> None:
        self._server.serve_forever()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _end_to_end(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    return {name: value for name, value in headers if name.lower() not in _HOP_BY_HOP}


def _throttled_headers() -> dict[str, str]:
    # As DynamoDB sends them; botocore reads the code from the body's `__type` and checks
    # the body against x-amz-crc32.
    return {
        "x-amzn-RequestId": uuid.uuid4().hex.upper(),
        "x-amz-crc32": str(zlib.crc32(THROTTLED)),
        "Content-Type": "application/x-amz-json-1.0",
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a connection botocore keeps alive never holds up close

    def __init__(self, faulty: FaultyStore) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.faulty = faulty


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects

    def do_POST(self) -> None:
        assert isinstance(self.server, _Server)
        faulty = self.server.faulty
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if faulty.refuses(self.headers.get("X-Amz-Target", ""), body):
            self._answer(400, "Bad Request", _throttled_headers(), THROTTLED)
            return
        # A fresh upstream connection per request: a reused one that dynalite closed while
        # idle would fail a request that was never delivered.
        upstream = http.client.HTTPConnection(*faulty.upstream, timeout=60)
        try:
            upstream.request("POST", self.path, body, _end_to_end(self.headers.items()))
            reply = upstream.getresponse()
            content = reply.read()
        finally:
            upstream.close()
        self._answer(reply.status, reply.reason, _end_to_end(reply.getheaders()), content)

    def _answer(self, status: int, reason: str, headers: dict[str, str], body: bytes) -> None:
        self.send_response_only(status, reason)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@contextmanager
def faulty_store(upstream: str) -> Iterator[FaultyStore]:
    """Run the proxy in front of `upstream` (an http URL) in a daemon thread."""
    store = FaultyStore(upstream)
    thread = threading.Thread(target=store.serve, name="faulty-store", daemon=True)
    thread.start()
    try:
        yield store
    finally:
        store.close()
        thread.join(timeout=30)
