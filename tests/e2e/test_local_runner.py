"""`make run` itself: bursts of connections, one error body, a readable log, a clean Ctrl-C.

Each test starts `scripts/serve_local.py` as `make run` does and speaks HTTP to it.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.e2e.http import ADMIN_TOKEN, SERVER_TOKEN, call
from tests.e2e.runner import Runner, make_run

pytestmark = pytest.mark.e2e

BURST = 256
SECRET = "s3cret-7f1c2b9e-never-echo-me"


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    with make_run(tmp_path_factory.mktemp("make-run")) as running:
        yield running


def raw_request(
    url: str,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request(method, path, body, headers or {})
        response = connection.getresponse()
        raw = response.read()
    finally:
        connection.close()
    parsed = json.loads(raw) if raw else None
    assert isinstance(parsed, dict), raw
    assert SECRET not in raw.decode(errors="replace")
    return response.status, parsed


def test_a_burst_of_256_connections_is_served_and_counted_exactly(runner: Runner) -> None:
    session = f"burst-{uuid.uuid4().hex[:8]}"
    payload = json.dumps({"session_id": session, "tool": "delete_tag"}).encode()
    headers = {"Authorization": f"Bearer {SERVER_TOKEN}", "Content-Type": "application/json"}
    start = threading.Barrier(BURST)
    statuses: Counter[int | str] = Counter()
    lock = threading.Lock()

    def client() -> None:
        start.wait()
        try:
            status, _ = raw_request(runner.url, "POST", "/v1/check", payload, headers)
            outcome: int | str = status
        except OSError as exc:  # a reset or refused connection is the failure under test
            outcome = type(exc).__name__
        with lock:
            statuses[outcome] += 1

    threads = [threading.Thread(target=client) for _ in range(BURST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert statuses == Counter({200: 15, 429: BURST - 15})
    view = call(f"{runner.url}/v1/sessions/{session}", token=ADMIN_TOKEN)
    assert view.body["categories"]["write"]["used"] == 15


GATEWAY_ERRORS = [
    # (status, code, method, path, headers, body)
    (401, "unauthorized", "POST", "/v1/check", {}, b"{}"),
    (403, "forbidden", "POST", "/v1/check", {"Authorization": f"Bearer {SECRET}"}, b"{}"),
    (403, "forbidden", "GET", "/v1/sessions/s", {"Authorization": f"Bearer {SERVER_TOKEN}"}, None),
    (404, "not_found", "GET", "/v1/nope", {"Authorization": f"Bearer {SECRET}"}, None),
    (404, "not_found", "POST", "/v1/chek", {"Authorization": SECRET}, b"{}"),
    (404, "not_found", "GET", "/nope", {}, None),
    (405, "method_not_allowed", "PUT", "/v1/check", {"Authorization": f"Bearer {SECRET}"}, b"{}"),
    (405, "method_not_allowed", "DELETE", "/health", {}, None),
    (
        415,
        "unsupported_media_type",
        "POST",
        "/v1/check",
        {"Authorization": f"Bearer {SERVER_TOKEN}", "Content-Type": "text/plain"},
        b"x",
    ),
]


@pytest.mark.parametrize(("status", "code", "method", "path", "headers", "body"), GATEWAY_ERRORS)
def test_gateway_errors_have_the_service_body_and_never_echo_a_header(
    runner: Runner,
    status: int,
    code: str,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes | None,
) -> None:
    got, reply = raw_request(runner.url, method, path, body, headers)
    assert got == status
    assert set(reply) == {"error"}
    assert reply["error"]["code"] == code
    assert isinstance(reply["error"]["message"], str) and reply["error"]["message"]


def test_service_errors_keep_their_own_body(runner: Runner) -> None:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    status, reply = raw_request(runner.url, "GET", "/v1/sessions/never-seen", None, headers)
    assert status == 404 and reply["error"]["code"] == "not_found"
    assert "never-seen" in reply["error"]["message"]


UNKNOWN_METHODS = [
    # (method, path, the Allow header; None where no route has the path)
    ("FOO", "/v1/check", "POST"),
    ("PROPFIND", "/v1/sessions", "GET"),
    ("M-SEARCH", "/console", "GET, HEAD"),
    ("TRACE", "/health", "GET"),
    ("BREW", "/no-such-route", None),
]


@pytest.mark.parametrize(("method", "path", "allow"), UNKNOWN_METHODS)
def test_every_unknown_method_gets_a_json_405(
    runner: Runner, method: str, path: str, allow: str | None
) -> None:
    """Defect class: a method the HTTP server had no handler for was answered `501` with
    an HTML page (http.server's own), not the service's JSON error."""
    host, port = runner.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request(method, path, headers={"Authorization": f"Bearer {SECRET}"})
        response = connection.getresponse()
        raw = response.read()
        assert not response.will_close  # the connection stays in step
        connection.request("GET", "/health")
        assert connection.getresponse().status == 200
    finally:
        connection.close()
    assert response.status == 405, raw
    assert response.getheader("Content-Type") == "application/json"
    assert response.getheader("Allow") == allow
    reply = json.loads(raw)
    assert set(reply) == {"error"} and reply["error"]["code"] == "method_not_allowed"
    assert SECRET not in raw.decode()


def test_a_request_line_http_server_cannot_parse_gets_a_json_error(runner: Runner) -> None:
    """Defect class (as above): http.server's own refusals were HTML pages."""
    host, port = runner.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        # A header line one byte past http.server's limit, and nothing after it: the
        # server reads all of it, so its close is clean (no reset for unread bytes).
        sock.sendall(b"GET /health HTTP/1.1\r\nX-Long: " + b"x" * (65_537 - 8))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, raw = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b"Content-Type: application/json" in head, head
    assert json.loads(raw)["error"]["code"] == "bad_request"


FORGED = "admin    POST /v1/tokens -> 201 reason='forged'"


def test_nothing_a_client_sends_forges_a_log_line(runner: Runner) -> None:
    """Defect class: a client-supplied value (here the path of an unauthenticated link
    route, percent-decoded) reached the log with its CR/LF, so a request could write a
    line of its choosing. Control characters in logged values are escaped."""
    marker = uuid.uuid4().hex
    forged = quote(f"\r\n{FORGED} {marker}\r\n\x1b[2K\u2028\x85", safe="")
    host, port = runner.url.removeprefix("http://").split(":")
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    for path, headers, status in (
        # no token needed: an email link's route
        (f"/actions/x{forged}", {"Content-Type": "application/x-www-form-urlencoded"}, 403),
        (f"/v1/sessions/{forged}/reset", admin, 400),
    ):
        connection = http.client.HTTPConnection(host, int(port), timeout=60)
        try:
            connection.request("POST", path, b'{"reason": "r"}', headers)
            assert connection.getresponse().status == status, path
        finally:
            connection.close()
    output = runner.output()
    lines = output.splitlines()
    mine = [line for line in lines if marker in line]
    assert len(mine) == 2, mine
    assert all(line.startswith("admin    POST /") and "\\x0d\\x0a" in line for line in mine)
    assert not [line for line in lines if line.startswith(FORGED)]
    assert not [c for c in "\x1b\x85\u2028" if c in output]


def check(url: str, session: str) -> int:
    return call(f"{url}/v1/check", "POST", {"session_id": session, "tool": "delete_tag"}).status


def test_the_log_shows_refusals_admin_actions_and_notifications_and_ctrl_c_exits_0(
    tmp_path: Path,
) -> None:
    with make_run(tmp_path) as running:
        session = f"log-{uuid.uuid4().hex[:8]}"
        statuses = [check(running.url, session) for _ in range(17)]
        assert statuses == [200] * 15 + [429] * 2
        reset = call(
            f"{running.url}/v1/sessions/{session}/reset",
            "POST",
            {"reason": "new batch"},
            token=ADMIN_TOKEN,
        )
        assert reset.status == 200
        assert running.ctrl_c() == 0
        lines = running.output().splitlines()

    refused = [line for line in lines if line.startswith("refused")]
    assert len(refused) == 2 and all(session in line for line in refused)
    assert "write 15/15" in refused[0] and "quota_exceeded" in refused[0]
    admin = [line for line in lines if line.startswith("admin")]
    assert admin == [f"admin    POST /v1/sessions/{session}/reset -> 200 reason='new batch'"]
    assert "=== notification (email) ===" in lines
    assert not [line for line in lines if "HTTP/1.1" in line]  # no access log, ours or moto's
    assert not [line for line in lines if '"_aws"' in line]  # no EMF metrics line
    # nor the service's own log lines, JSON or Chalice's plain text: one line per refusal
    assert not [line for line in lines if '"level"' in line or " - WARNING - " in line]
    assert not [line for line in lines if "Found credentials" in line]  # botocore INFO
    assert "Traceback (most recent call last):" not in lines, "\n".join(lines[-60:])
    assert lines[-1] == "mcp-quota stopped."


def test_verbose_shows_the_access_log_and_metrics(tmp_path: Path) -> None:
    with make_run(tmp_path, {"VERBOSE": "1"}) as running:
        session = f"verbose-{uuid.uuid4().hex[:8]}"
        assert check(running.url, session) == 200
        allowed_only = running.output()
        # Metrics are written for refusals (ChecksBlocked), never per allowed check.
        assert [check(running.url, session) for _ in range(15)] == [200] * 14 + [429]
        assert running.ctrl_c() == 0
        output = running.output()
    assert '"POST /v1/check HTTP/1.1" 200' in output
    assert '"_aws"' not in allowed_only
    assert '"_aws"' in output and '"ChecksBlocked"' in output
    assert output.splitlines()[-1] == "mcp-quota stopped."


def test_the_log_shows_approval_refusals_and_decisions(tmp_path: Path) -> None:
    """Defect class: with an approval policy, `make run`'s log showed nothing of a call
    waiting for a person (a 403, not a 429), nor of the approve and deny that decide it,
    so the one watching the log could not tell where to approve."""
    policy = tmp_path / "approval-policy.json"
    policy.write_text(
        json.dumps(
            {
                "version": 1,
                "categories": {"read": {"limit": 200}, "write": {"limit": 15}},
                "rules": [{"tools": ["drop_table"], "category": "write", "approval": True}],
            }
        )
    )
    session = f"approve-{uuid.uuid4().hex[:8]}"
    with make_run(tmp_path, {"QUOTA_POLICY": str(policy)}) as running:

        def drop(table: str) -> Any:
            digest = hashlib.sha256(json.dumps({"table": table}).encode()).hexdigest()
            body = {"session_id": session, "tool": "drop_table", "args_digest": digest}
            return call(f"{running.url}/v1/check", "POST", body).body

        def decide(approval_id: str, action: str) -> None:
            path = f"{running.url}/v1/approvals/{approval_id}/{action}"
            assert call(path, "POST", {"reason": "ok"}, ADMIN_TOKEN).status == 200

        asked = drop("users")["approval"]
        decide(asked["id"], "approve")
        denied = drop("orders")["approval"]["id"]
        decide(denied, "deny")
        assert drop("orders")["error"]["code"] == "approval_denied"
        assert running.ctrl_c() == 0
        lines = running.output().splitlines()

    refused = [line for line in lines if line.startswith("refused")]
    assert len(refused) == 3, refused
    assert f"drop_table in session '{session}'" in refused[0]
    assert asked["console_url"] in refused[0] and "(approval_required)" in refused[0]
    assert "(approval_denied)" in refused[2]
    admin = [line for line in lines if line.startswith("admin")]
    assert admin == [
        f"admin    POST /v1/approvals/{asked['id']}/approve -> 200 reason='ok'",
        f"admin    POST /v1/approvals/{denied}/deny -> 200 reason='ok'",
    ]
