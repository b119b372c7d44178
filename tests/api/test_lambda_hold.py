"""The after-answer hold on Lambda (`api.lambda_hold`), against a local server speaking the
Lambda Extensions API (register, event/next): the invocation is held open after the
handler returned until the writes left for after the answer are done, never past its
deadline; without the API, those writes are made before the answers."""

from __future__ import annotations

import json
import os
import queue
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chalicelib.api import context, lambda_hold
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
    assert done == ["held back", "admission", "held back"]  # and what the writes left
    assert left == [0]


def test_a_failing_flush_at_shutdown_still_exits() -> None:
    def fails() -> None:
        raise RuntimeError("store down")

    left: list[int] = []
    shut_down(fails, left.append)
    assert left == [0]


def test_a_real_sigterm_records_what_is_held_back_then_exits(
    api: ExtensionsApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handler `start` installs, on a SIGTERM delivered to this process."""
    monkeypatch.setenv("AWS_LAMBDA_RUNTIME_API", api.address)
    monkeypatch.setattr(lambda_hold, "_HOLD", [])
    left: list[int] = []
    monkeypatch.setattr(os, "_exit", left.append)
    flushed: list[str] = []
    before = signal.getsignal(signal.SIGTERM)
    try:
        lambda_hold.start(at_shutdown=lambda: flushed.append("held back"))
        signal.raise_signal(signal.SIGTERM)
        assert flushed == ["held back", "held back"]  # before and after the writes settle
        assert left == [0]
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # a second one: ignored
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_slow_store_at_shutdown_does_not_outlast_its_time() -> None:
    """Lambda kills the runtime 500 ms after SIGTERM: a flush that hangs (a stale
    connection, a throttled store) is left behind, and the process still exits in time."""
    never = threading.Event()
    left: list[int] = []
    started = time.monotonic()
    shut_down(lambda: never.wait(5), left.append, within_s=0.3)
    assert time.monotonic() - started < 0.45
    assert left == [0]
    never.set()


def test_a_lock_the_main_thread_holds_does_not_hang_the_shutdown() -> None:
    """SIGTERM runs its handler on the main thread between two bytecodes: if that thread
    holds a lock the flush needs, the flush (on a thread of its own) waits, not the exit."""
    lock = threading.Lock()
    left: list[int] = []

    def flush() -> None:
        with lock:
            pass

    with lock:  # the main thread was inside a `with lock` when the signal came
        shut_down(flush, left.append, within_s=0.2)
    assert left == [0]


def test_at_shutdown_a_container_that_never_checked_builds_nothing() -> None:
    """Building the check at shutdown would read the settings and the policy (and report
    a bad policy on every shutdown) for nothing to flush."""
    context.reset_dependencies(None)
    context.flush_held()
    assert context._container is None
