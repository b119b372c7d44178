"""bench/latency_proxy.py in its own process, forwarding keep-alive HTTP to a real server."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from bench.latency_proxy import latency_proxy


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    connections: ClassVar[set[tuple[str, int]]] = set()

    def do_POST(self) -> None:
        _Echo.connections.add(self.client_address)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_keep_alive_requests_pass_through_on_one_upstream_connection(upstream: str) -> None:
    _Echo.connections.clear()
    with latency_proxy(upstream, 1) as endpoint:
        port = int(endpoint.rpartition(":")[2])
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        answers = []
        for body in (b"one", b"two" * 40_000, b"three"):
            connection.request("POST", "/", body=body)
            answers.append(connection.getresponse().read())
        connection.close()
    assert answers == [b"one", b"two" * 40_000, b"three"]
    assert len(_Echo.connections) == 1
