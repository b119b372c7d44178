"""`make run`'s gateway speaks HTTP/1.1 properly: HEAD, bad bodies, 415, keep-alive.

Every request of a test goes over ONE `http.client` connection, as a browser or an SDK
keeps it: an answer with a stray body, or a dropped connection, shows up as a desynchronised
or failed next request.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.http import ADMIN_TOKEN, SERVER_TOKEN
from tests.e2e.runner import Runner, make_run

pytestmark = pytest.mark.e2e

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    with make_run(tmp_path_factory.mktemp("gateway-http")) as running:
        yield running


@pytest.fixture
def connection(runner: Runner) -> Iterator[http.client.HTTPConnection]:
    host, port = runner.url.removeprefix("http://").split(":")
    one = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        yield one
    finally:
        one.close()


def exchange(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    connection.request(method, path, body, headers or {})
    response = connection.getresponse()
    raw = response.read()
    assert not response.will_close, f"{method} {path} closed the connection"
    return response.status, dict(response.getheaders()), raw


def health(connection: http.client.HTTPConnection) -> dict[str, Any]:
    """A GET /health on the same connection: it must parse as /health's own answer."""
    status, _, raw = exchange(connection, "GET", "/health")
    assert status == 200, raw
    body = json.loads(raw)
    assert isinstance(body, dict)
    return body


def pipelined(runner: Runner, raw: bytes) -> bytes:
    """Send raw requests at once on one socket (the last asks to close); all it answered."""
    host, port = runner.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_head_answers_headers_only_and_the_connection_stays_in_step(runner: Runner) -> None:
    for path in ("/health", "/no-such-route", "/v1/sessions", "/console"):
        answer = pipelined(
            runner,
            f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n"
            "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode(),
        )
        head, _, rest = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 "), answer
        assert rest.startswith(b"HTTP/1.1 200 "), f"HEAD {path} sent a body: {rest[:120]!r}"


def test_deep_json_on_an_admin_route_answers_400(connection: http.client.HTTPConnection) -> None:
    deep = b"[" * 8000 + b"]" * 8000  # under the 16 KiB body limit, past the parser's depth
    for path in ("/v1/sessions/deep/raise", "/v1/grants", "/v1/check"):
        status, _, raw = exchange(connection, "POST", path, deep, ADMIN)
        assert status == 400, (path, raw)
        assert json.loads(raw)["error"]["code"]
        health(connection)


def test_huge_json_answers_a_json_error_and_keeps_the_connection(
    connection: http.client.HTTPConnection,
) -> None:
    huge = json.dumps({"reason": "x" * 2_000_000, "category": "write", "by": 1}).encode()
    status, _, raw = exchange(connection, "POST", "/v1/sessions/huge/raise", huge, ADMIN)
    assert status in (400, 413), raw
    assert json.loads(raw)["error"]["code"]
    health(connection)


def test_a_number_too_long_for_python_answers_400(
    connection: http.client.HTTPConnection,
) -> None:
    body = b'{"reason": 1' + b"0" * 5000 + b"}"
    status, _, raw = exchange(connection, "POST", "/v1/sessions/long/raise", body, ADMIN)
    assert status == 400, raw
    health(connection)


def test_415_names_what_was_sent_and_what_the_route_accepts(
    connection: http.client.HTTPConnection,
) -> None:
    status, _, raw = exchange(
        connection, "POST", "/actions/some-token", b"{}", {"Content-Type": "application/json"}
    )
    assert status == 415, raw
    message = json.loads(raw)["error"]["message"]
    assert "application/json" in message
    assert "application/x-www-form-urlencoded" in message
    assert "Send the body as JSON" not in message
    health(connection)


def test_a_chunked_body_is_read_not_left_in_the_stream(
    connection: http.client.HTTPConnection,
) -> None:
    payload = json.dumps({"session_id": "chunked", "tool": "search_articles"}).encode()
    chunks = iter([payload[:10], payload[10:]])
    connection.request(
        "POST",
        "/v1/check",
        chunks,
        {"Authorization": f"Bearer {SERVER_TOKEN}", "Content-Type": "application/json"},
        encode_chunked=True,
    )
    response = connection.getresponse()
    raw = response.read()
    assert response.status == 200, raw
    health(connection)


def test_a_bad_content_length_answers_400_then_closes(runner: Runner) -> None:
    host, port = runner.url.removeprefix("http://").split(":")
    one = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        one.putrequest("POST", "/v1/check")
        one.putheader("Content-Length", "abc")
        one.endheaders()
        response = one.getresponse()
        raw = response.read()
        assert response.status == 400, raw
        assert json.loads(raw)["error"]["code"] == "bad_request"
    finally:
        one.close()
