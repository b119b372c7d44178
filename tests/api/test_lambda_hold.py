"""The after-answer hold on Lambda (`api.lambda_hold`), against a local server speaking the
Lambda Extensions API (register, event/next): the invocation is held open after the
handler returned until the writes left for after the answer are done, never past its
deadline; without the API, those writes are made before the answers."""

from __future__ import annotations

import json
import queue
import signal
import threading
import time
from collections.abc import Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chalicelib.api import lambda_hold
from chalicelib.api.lambda_hold import LambdaHold, shut_down
from chalicelib.check import afterwards
from chalicelib.check.afterwards import Afterwards


class ExtensionsApi:
    """Lambda's side of the Extensions API: `invoke` sends the INVOKE event to the
    extension's waiting `next`; `nexts` records when each `next` was asked."""

    def __init__(self, refuse: bool = False, fail_next: int = 0) -> None:
        self.fail_next = fail_next  # `next` answers 500 this many times first
        self.events: queue.Queue[dict[str, object]] = queue.Queue()
        self.nexts: queue.Queue[float] = queue.Queue()
        self.registered: list[dict[str, object]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.registered.append({"name": self.headers["Lambda-Extension-Name"], **body})
                self.send_response(403 if refuse else 200)
                self.send_header("Lambda-Extension-Identifier", "ext-1")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_GET(self) -> None:
                assert self.headers["Lambda-Extension-Identifier"] == "ext-1"
                if api.fail_next:
                    api.fail_next -= 1
                    self.send_response(500)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")
                    return
                api.nexts.put(time.monotonic())
                data = json.dumps(api.events.get()).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def invoke(self, deadline_in_s: float = 10.0, request_id: str = "r") -> None:
        deadline_ms = (time.time() + deadline_in_s) * 1000
        self.events.put({"eventType": "INVOKE", "deadlineMs": deadline_ms, "requestId": request_id})


@pytest.fixture
def api() -> Iterator[ExtensionsApi]:
    server = ExtensionsApi()
    yield server
    server.server.shutdown()


def test_the_invocation_ends_once_the_writes_after_the_answer_are_done(
    api: ExtensionsApi,
) -> None:
    hold = LambdaHold(api.address)
    assert hold.start()
    assert api.registered == [{"name": "mcp-quota-after-answer", "events": ["INVOKE"]}]
    api.nexts.get(timeout=5)  # waiting for the first invocation
    writes, release = Afterwards(), threading.Event()
    api.invoke(request_id="r1")
    writes.later("k", lambda: release.wait(10), "a held write")
    hold.answered("r1")  # the handler returned: its response is on its way
    with pytest.raises(queue.Empty):
        api.nexts.get(timeout=0.5)  # held: the write is not done
    release.set()
    api.nexts.get(timeout=5)  # the invocation ends
    api.invoke(request_id="r2")
    hold.answered("r2")  # nothing left to write: ends at once
    api.nexts.get(timeout=5)


def test_a_hold_never_outlasts_the_invocations_deadline(api: ExtensionsApi) -> None:
    hold = LambdaHold(api.address)
    assert hold.start()
    api.nexts.get(timeout=5)
    never = threading.Event()
    Afterwards().later("k", lambda: never.wait(30), "a write that hangs")
    started = time.monotonic()
    api.invoke(deadline_in_s=3.0)  # the handler never says it returned either
    ended = api.nexts.get(timeout=10)
    assert 2.0 < ended - started < 3.0  # held until the deadline less its margin
    never.set()
    assert afterwards.settle_all(10)


def test_without_the_extensions_api_writes_are_made_before_the_answers() -> None:
    refusing = ExtensionsApi(refuse=True)
    try:
        assert not LambdaHold(refusing.address).start()
        afterwards.inline(True)
        done: list[str] = []
        Afterwards().later("k", lambda: done.append("written"), "a write")
        assert done == ["written"]  # before `later` returned
    finally:
        afterwards.inline(False)
        refusing.server.shutdown()


def test_a_failing_next_is_asked_again_and_writes_go_before_the_answers_meanwhile() -> None:
    """Lambda ends no invocation until the extension asks for its next event: a hold that
    stopped asking after an error would hang every invocation to its timeout."""
    flaky = ExtensionsApi(fail_next=2)
    try:
        hold = LambdaHold(flaky.address)
        assert hold.start()
        flaky.nexts.get(timeout=5)  # asked again after two 500s
        done: list[str] = []
        Afterwards().later("k", lambda: done.append("written"), "a write")
        assert done == ["written"]  # meanwhile made before the answers
        flaky.invoke(request_id="r1")  # `next` answers again: the hold is back
        hold.answered("r1")
        flaky.nexts.get(timeout=5)
        release, after = threading.Event(), []

        def held_write() -> None:
            release.wait(2)
            after.append("written")

        Afterwards().later("k", held_write, "a write after the answer")
        assert after == []  # `later` returned before its write was made
        release.set()
        assert afterwards.settle_all(5)
        assert after == ["written"]
    finally:
        afterwards.inline(False)
        flaky.server.shutdown()


def test_a_handler_answering_after_its_hold_gave_up_never_ends_the_next_one(
    api: ExtensionsApi,
) -> None:
    """Defect class (review): the hold counted answers; a handler that returned after its
    hold gave up at the deadline left the count one ahead for good, and every later
    invocation ended before its writes landed (frozen with the environment)."""
    hold = LambdaHold(api.address)
    assert hold.start()
    api.nexts.get(timeout=5)
    api.invoke(deadline_in_s=0.5, request_id="late")
    api.nexts.get(timeout=5)  # gave up at the deadline
    hold.answered("late")  # ... and then its handler returned
    release = threading.Event()
    api.invoke(request_id="next")
    Afterwards().later("k", lambda: release.wait(10), "the next one's write")
    hold.answered("next")
    with pytest.raises(queue.Empty):
        api.nexts.get(timeout=0.5)  # held for its own write
    release.set()
    api.nexts.get(timeout=5)


def test_at_shutdown_what_is_held_back_is_recorded_and_the_writes_finish() -> None:
    """Defect class: lost audit data. Refusals a runaway loop got from the container's
    memory are recorded at the container's next check after their window; an environment
    Lambda shut down before that lost them. SIGTERM (sent because an extension is
    registered) now records them and waits for the writes after answers, then exits."""
    done: list[str] = []
    release = threading.Event()

    def admission() -> None:
        release.wait(5)
        done.append("admission")

    Afterwards().later("k", admission, "a write")
    left: list[int] = []
    threading.Timer(0.05, release.set).start()
    shut_down(lambda: done.append("held back"), left.append)
    assert done == ["held back", "admission"]
    assert left == [0]


def test_a_failing_flush_at_shutdown_still_exits() -> None:
    def fails() -> None:
        raise RuntimeError("store down")

    left: list[int] = []
    shut_down(fails, left.append)
    assert left == [0]


def test_start_installs_the_shutdown_handler(
    api: ExtensionsApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_RUNTIME_API", api.address)
    monkeypatch.setattr(lambda_hold, "_HOLD", [])
    before = signal.getsignal(signal.SIGTERM)
    try:
        lambda_hold.start(at_shutdown=lambda: None)
        handler = signal.getsignal(signal.SIGTERM)
        assert isinstance(handler, partial) and handler.func is shut_down
    finally:
        signal.signal(signal.SIGTERM, before)
