"""On Lambda, each invocation is held open after its response until the writes its check
left for after the answer are done (`check.afterwards`: an allowed call's admission).

Lambda freezes the environment once an invocation ends, with any thread still running in
it, until the next one. An internal extension (a thread of this process registered with
the Lambda Extensions API for INVOKE events) changes when an invocation ends: Lambda sends
the handler's response as soon as the handler returns, and ends the invocation only when
every extension has asked for its next event. The hold asks for it once the handler has
returned (`answered`, from the HTTP middleware) and the writes are done, or at the
invocation's deadline less a margin, whichever comes first.

If the extension cannot register (not on Lambda, an API that refuses it), the writes are
made before each answer instead (`afterwards.inline`): slower, never lost to a freeze.

Because an extension is registered, Lambda sends the runtime SIGTERM before it shuts an
environment down, and gives it 500 ms (the python3.12 and python3.13 runtimes let a
handler run while they wait for the next event). The hold then records what the container
still holds back (`at_shutdown`: refusals a runaway loop got from memory, not due yet) and
waits for the writes after answers, for at most `SHUTDOWN_S`, then exits. Best effort: a
store slower than that leaves the rest out of the views, as without it.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from functools import partial
from types import FrameType

from chalicelib.api.deferred import afterwards, deadline
from chalicelib.observability import logger

VERSION = "2020-01-01"
NAME = "mcp-quota-after-answer"
MARGIN_S = 0.2  # kept back from the invocation's deadline
ANSWERED_HINTS = 1000  # request ids kept whose INVOKE event has not come (then cleared)
RETRY_S = 0.05  # the first pause before asking the Extensions API again
SHUTDOWN_S = 0.4  # of the 500 ms Lambda gives the runtime after SIGTERM
SHUTDOWN_STEP_S = 0.1  # a session's records are sent at shutdown only if this much is left


class LambdaHold:
    """The internal extension; `answered` is called when a handler returns."""

    def __init__(
        self,
        runtime_api: str,
        settle: Callable[[float], bool] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = runtime_api
        self._settle = settle or afterwards.settle_all
        self._clock = clock
        self._turns = threading.Condition()
        self._answered: set[str] = set()  # request ids whose handler returned
        self._id = ""

    def start(self) -> bool:
        """Register and start the extension's thread; whether it runs."""
        try:
            status, headers, _ = self._call("POST", "register", {"events": ["INVOKE"]}, NAME)
            self._id = headers.get("Lambda-Extension-Identifier", "")
            if status != 200 or not self._id:
                raise OSError(f"register answered {status}")
        except OSError as exc:
            extra = {"error": str(exc)}
            logger.warning("no after-answer hold: writes are made before answers", extra=extra)
            return False
        threading.Thread(target=self._loop, daemon=True, name="quota-hold").start()
        return True

    def answered(self, request_id: str) -> None:
        """The handler of invocation `request_id` returned (its response is on its way).
        By request id, not by count: a handler that returns after its hold gave up at the
        deadline can never be taken for the next invocation's."""
        with self._turns:
            if len(self._answered) >= ANSWERED_HINTS:
                self._answered.clear()
            self._answered.add(request_id)
            self._turns.notify_all()

    def _loop(self) -> None:
        pause = RETRY_S
        while True:
            try:
                status, _, event = self._call("GET", "event/next", None)
                if status != 200:
                    raise OSError(f"next answered {status}")
            except OSError as exc:
                # Lambda waits for this extension's `next`: never stop asking. Meanwhile
                # the writes are made before the answers (a freeze cannot delay them).
                logger.warning("the after-answer hold failed", extra={"error": str(exc)})
                afterwards.inline(True)
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            if pause != RETRY_S:  # it failed before: held again, writes after answers
                afterwards.inline(False)
                pause = RETRY_S
            if event.get("eventType") != "INVOKE":
                continue
            deadline_ms = event.get("deadlineMs")
            if not isinstance(deadline_ms, int | float):
                deadline_ms = (self._clock() + 3) * 1000  # not said: a short hold
            self._hold(str(event.get("requestId", "")), deadline_ms / 1000 - MARGIN_S)

    def _hold(self, request_id: str, until_s: float) -> None:
        """Until the handler of this invocation returned and the writes are done, or
        `until_s` (epoch seconds)."""
        with self._turns:
            self._turns.wait_for(
                lambda: request_id in self._answered, max(0.0, until_s - self._clock())
            )
            self._answered.discard(request_id)
        self._settle(max(0.0, until_s - self._clock()))

    def _call(
        self, method: str, path: str, body: dict[str, object] | None, name: str = ""
    ) -> tuple[int, dict[str, str], dict[str, object]]:
        connection = http.client.HTTPConnection(self._api)  # no timeout: `next` waits
        headers = {"Content-Type": "application/json"}
        if name:
            headers["Lambda-Extension-Name"] = name
        if self._id:
            headers["Lambda-Extension-Identifier"] = self._id
        try:
            payload = json.dumps(body).encode() if body is not None else None
            connection.request(method, f"/{VERSION}/extension/{path}", payload, headers)
            response = connection.getresponse()
            data = response.read()
            answer = json.loads(data) if data else {}
            return response.status, dict(response.getheaders()), answer
        except ValueError as exc:
            raise OSError(f"the Extensions API answered no JSON: {exc}") from exc
        finally:
            connection.close()


_HOLD: list[LambdaHold] = []


def start(at_shutdown: Callable[[], None] = lambda: None) -> None:
    """On Lambda: start the hold (once), and on SIGTERM run `at_shutdown` (`shut_down`);
    if the hold cannot run, writes after answers are made before them instead."""
    api = os.environ.get("AWS_LAMBDA_RUNTIME_API")
    if _HOLD or not api:
        return
    hold = LambdaHold(api)
    if not hold.start():
        afterwards.inline(True)
        return
    _HOLD.append(hold)
    try:
        signal.signal(signal.SIGTERM, partial(_on_sigterm, at_shutdown))
    except ValueError:  # not the main thread: Lambda's SIGKILL ends it as before
        logger.warning("no SIGTERM handler: refusals held back may be lost at shutdown")


def _on_sigterm(at_shutdown: Callable[[], None], signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once
    shut_down(at_shutdown, os._exit)


def shut_down(
    flush: Callable[[], object], leave: Callable[[int], object], within_s: float = SHUTDOWN_S
) -> None:
    """The environment is shutting down: `flush` what the container holds back, wait for
    the writes after answers, and `flush` what they left, for at most `within_s`; then
    `leave(0)` whatever is left. The work runs on a thread of its own: the handler runs on
    the main thread, which may hold a lock the flush needs. Never raises."""
    ends = deadline.Deadline(time.monotonic() + within_s, step_s=SHUTDOWN_STEP_S)
    failed: list[BaseException] = []

    def work() -> None:
        try:
            with deadline.answering_by(ends):
                flush()
                afterwards.settle_all(max(0.0, ends.left_s()))
                if ends.allows_step():
                    flush()
        except Exception as exc:  # reported below
            failed.append(exc)

    worker = threading.Thread(target=work, name="mcp-quota-shutdown", daemon=True)
    try:
        worker.start()
        worker.join(max(0.0, ends.left_s()))
    except RuntimeError as exc:  # no thread could start
        failed.append(exc)
    done = not failed and not worker.is_alive() and afterwards.settle_all(0)
    spent_ms = round((within_s - ends.left_s()) * 1000)
    if done:
        logger.info("at shutdown: records held back written", extra={"ms": spent_ms})
    else:
        error = repr(failed[0]) if failed else "out of time"
        extra = {"ms": spent_ms, "error": error}
        logger.warning("at shutdown: records held back may be lost", extra=extra)
    leave(0)


def answered(request_id: str | None) -> None:
    """The handler of invocation `request_id` returned (the HTTP middleware calls this;
    nothing off Lambda)."""
    if _HOLD and request_id:
        _HOLD[0].answered(request_id)
