"""Writes a check leaves for after its answer: none of them changes what was answered, so
the answer does not wait for them (an allowed call's admission, `check.life`).

Each runs on the container's step workers (`check.parallel`) in a copy of the check's
context, so the check's deadline bounds it as it bounded the check. A check of this
container that meets one of them still pending (a copy of the call sent right after its
answer) waits for it first (`wait_for`), so a client that retries through the same
container always sees its own call admitted. On Lambda, the environment is held after the
response until they are done (`api.lambda_hold`): a thread left running when the handler
returns is otherwise frozen until the next invocation.

What one of them cannot do (the store failed, the deadline came) is logged and counted
(`AfterAnswerLost`); for an admission that means its copies are answered 409 until the
call's life ends and are then counted anew: every count still matches an allowed call.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import partial

from chalicelib.check.deadline import SERVICE_BUDGET_S
from chalicelib.check.parallel import submit
from chalicelib.observability import count, logger
from chalicelib.storage.ports import RecordChanged, StorageError

# Every container's writes after answers, for the Lambda hold (`settle_all`).
_SETTLED = threading.Condition()
_IN_FLIGHT = [0]
_INLINE = [False]
DONE_HINTS = 10_000  # writes made in the last `DONE_FRESH_S`, kept at most
# A check that read the store before a write landed asks about it within its own budget.
DONE_FRESH_S = SERVICE_BUDGET_S


def inline(on: bool) -> None:
    """Make writes after answers before them instead (on Lambda without the hold)."""
    _INLINE[0] = on


class Afterwards:
    """The writes checks of one service left for after their answers, by key (a session
    and call id)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._pending: dict[Hashable, int] = {}
        self._done: OrderedDict[Hashable, float] = OrderedDict()  # when made, oldest first
        self._clock = clock

    def later(self, key: Hashable, work: Callable[[], object], doing: str) -> None:
        """Run `work` after the answer (`doing` names it in a log line if it fails)."""
        with _SETTLED:
            self._pending[key] = self._pending.get(key, 0) + 1
            _IN_FLIGHT[0] += 1
        if not _INLINE[0]:
            run = contextvars.copy_context().run
            try:
                submit(partial(run, self._run, key, work, doing))
                return
            except RuntimeError:  # no worker could start (threads exhausted, shutdown)
                logger.warning("no worker for a write after the answer: made before it")
        self._run(key, work, doing)

    def _run(self, key: Hashable, work: Callable[[], object], doing: str) -> None:
        made = False
        try:
            work()
            made = True
        except (StorageError, RecordChanged) as exc:
            extra = {"doing": doing, "error": str(exc)}
            logger.warning("a write after the answer was not made", extra=extra)
            count("AfterAnswerLost")
        except Exception:  # a worker never dies: the next check needs it
            logger.exception("a write after the answer failed", extra={"doing": doing})
            count("AfterAnswerLost")
        finally:
            with _SETTLED:
                left = self._pending[key] - 1
                if left:
                    self._pending[key] = left
                else:
                    del self._pending[key]
                if made:
                    self._done.pop(key, None)
                    self._done[key] = self._clock()
                    if len(self._done) > DONE_HINTS:
                        self._done.popitem(last=False)
                _IN_FLIGHT[0] -= 1
                _SETTLED.notify_all()

    def wait_for(self, key: Hashable, timeout_s: float) -> bool:
        """Whether writes for `key` were pending here, or made within `DONE_FRESH_S` (the
        asking check may have read the store just before they landed; every check that
        asks in that time is told, not only the first): read it again. If pending, wait
        (at most `timeout_s`) until they are done."""
        with _SETTLED:
            if key not in self._pending:
                made = self._done.get(key)
                return made is not None and self._clock() - made <= DONE_FRESH_S
            _SETTLED.wait_for(lambda: key not in self._pending, timeout_s)
            return True


def settle_all(timeout_s: float) -> bool:
    """Wait (at most `timeout_s`) until no write after an answer is pending in this
    process; whether none is."""
    with _SETTLED:
        return _SETTLED.wait_for(lambda: _IN_FLIGHT[0] == 0, timeout_s)
