"""Atomicity under concurrency, on dynalite (atomic per item like DynamoDB; moto is not)
and on the in-memory adapter; and botocore's own retry of a write whose answer was lost."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest
from botocore.exceptions import ReadTimeoutError

from chalicelib.aws import CLIENT_CONFIG
from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.clock import system_clock
from chalicelib.quota.answers import Allowed, Decision, Refused
from chalicelib.quota.core import RefusalReason, SessionKey
from chalicelib.quota.policy import load_policy
from chalicelib.storage.dynamodb.counters import CounterStore
from chalicelib.storage.memory.records import MemoryCounters
from chalicelib.storage.ports import LimitChange, RecordChanged, SessionCounters
from tests.support import client_for, fresh_settings, provisioned

POLICY = load_policy("default.json")
CATEGORIES = tuple(POLICY.categories)
IDLE = 3600
CLIENTS = 64
ROUNDS = 10
CHECKERS = 32
ACTION_TIMES = 5
PROGRESS = 8  # answers to wait for around each action: checks keep flowing meanwhile


@pytest.fixture(scope="module", params=["memory", "dynalite"])
def counters(request: pytest.FixtureRequest) -> SessionCounters:
    """One store per module and backend; every test uses sessions of its own."""
    if request.param == "memory":
        return MemoryCounters(CATEGORIES)
    endpoint = request.getfixturevalue("dynalite_endpoint")
    client = client_for(endpoint, pool=CLIENTS + 8)
    settings = provisioned(client, fresh_settings(f"c{uuid.uuid4().hex[:8]}"))
    return CounterStore(client, settings.counters_table, CATEGORIES)


def fresh_session(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:8]}"


# -- 64 clients at once get exactly the limit ------------------------------------------


def burst(service: CheckService, session: str, call_ids: bool) -> list[Decision]:
    barrier = threading.Barrier(CLIENTS)

    def one(i: int) -> Decision:
        call_id = f"call-{i}" if call_ids else None
        request = CheckRequest(session, "delete_tag", call_id=call_id)
        barrier.wait()
        return service.check("demo", request)

    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(one, range(CLIENTS)))


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_64_concurrent_clients_get_exactly_the_write_limit(
    counters: SessionCounters, round_: int
) -> None:
    service = CheckService(POLICY, counters, system_clock, IDLE)
    session = fresh_session(f"burst-{round_}")
    decisions = burst(service, session, call_ids=round_ % 2 == 1)
    allowed = [d for d in decisions if d.allowed]
    assert len(allowed) == 15
    assert sorted(d.used for d in allowed) == list(range(1, 16))
    refused = [d for d in decisions if isinstance(d, Refused)]
    assert all(d.used == 15 for d in refused)
    assert sum(d.first_exhaustion for d in refused) == 1
    stored = counters.get(SessionKey("demo", session))
    assert stored is not None
    assert stored.counts == {"write": 15} and stored.refused == {"write": CLIENTS - 15}


# -- administrator actions on a session that agents keep calling -----------------------


class Checkers:
    """32 threads calling `check` on one session until stopped; counts their answers so
    the test can wait for checks to be in flight around each action."""

    def __init__(self, service: CheckService, session: str) -> None:
        self._service = service
        self._session = session
        self._go = threading.Event()  # all start together, not each amid the others' load
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self.answers = 0
        self.errors: list[BaseException] = []
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(CHECKERS)
        ]

    def _run(self, i: int) -> None:
        n = 0
        self._go.wait()
        while not self._stop.is_set():
            n += 1
            call_id = f"{i}-{n}" if i % 2 else None
            try:
                self._service.check(
                    "demo", CheckRequest(self._session, "delete_tag", call_id=call_id)
                )
            except Exception as exc:  # a failed check is a finding, kept for the assertion
                self.errors.append(exc)
            with self._progress:
                self.answers += 1
                self._progress.notify_all()

    def wait_for(self, checks: int) -> None:
        """Block until `checks` more answers came back."""
        with self._progress:
            target = self.answers + checks
            assert self._progress.wait_for(lambda: self.answers >= target, timeout=60)

    def __enter__(self) -> Checkers:
        for thread in self._threads:
            thread.start()
        self._go.set()
        self.wait_for(PROGRESS)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)


def _raise(counters: SessionCounters, session: SessionKey, n: int) -> None:
    new = 20 + 5 * n
    after = counters.raise_limit(
        session, LimitChange("write", new, system_clock(), IDLE * 1000), counters.get(session)
    )
    assert after.raised == {"write": new}


def _suspend(counters: SessionCounters, session: SessionKey, n: int) -> None:
    after = counters.suspend(session, f"looping {n}", system_clock())
    assert after.suspended and after.suspended_reason == f"looping {n}"


def _resume(counters: SessionCounters, session: SessionKey, n: int) -> None:
    assert not counters.resume(session, system_clock(), IDLE * 1000).suspended


def _reset(counters: SessionCounters, session: SessionKey, n: int) -> None:
    after = counters.reset(session, system_clock(), IDLE * 1000)
    assert after.counts == {} and after.refused == {}


ACTIONS: dict[str, Callable[[SessionCounters, SessionKey, int], None]] = {
    "raise": _raise,
    "suspend": _suspend,
    "resume": _resume,
    "reset": _reset,
}


@pytest.mark.parametrize("action", ACTIONS)
def test_admin_actions_succeed_first_time_while_32_threads_keep_checking(
    counters: SessionCounters, action: str
) -> None:
    """Issue 10: resume failed with "kept changing" while refused checks kept rewriting
    the clock its condition compared. Every action must succeed on its first call."""
    service = CheckService(POLICY, counters, system_clock, IDLE)
    session_id = fresh_session(action)
    session = SessionKey("demo", session_id)
    service.check("demo", CheckRequest(session_id, "delete_tag"))
    with Checkers(service, session_id) as checkers:
        for n in range(ACTION_TIMES):
            if action == "resume":
                _suspend(counters, session, n)
                checkers.wait_for(PROGRESS)
            ACTIONS[action](counters, session, n)
            if action == "suspend":
                answer = service.check("demo", CheckRequest(session_id, "search_articles"))
                assert isinstance(answer, Refused)
                assert answer.reason is RefusalReason.SESSION_SUSPENDED
            if action == "resume":
                read = service.check("demo", CheckRequest(session_id, "search_articles"))
                assert read.allowed
            checkers.wait_for(PROGRESS)
    # Here the session changes every few checks, more often than a loaded emulator
    # answers one: a check whose every round straddles an action gives up ("kept
    # changing", a 503 the client retries). That is the only way a check may fail.
    assert all(isinstance(e, RecordChanged) for e in checkers.errors)
    stored = counters.get(session)
    assert stored is not None
    assert stored.counts.get("write", 0) <= stored.limit_for("write", 15, stored.last_seen_ms)


# -- botocore's own retry, on dynalite -------------------------------------------------


class LoseFirstAppliedResponse:
    """A `before-send` handler: delivers the first UpdateItem that applies itself, then
    raises ReadTimeoutError as if its response were lost on the way back, so botocore's
    retry sends it again. Requests whose condition fails are simply sent by botocore."""

    EVENT = "before-send.dynamodb.UpdateItem"

    def __init__(self, client: Any) -> None:
        self._client = client
        self.lost: str | None = None
        self.sent_after_loss = 0

    def arm(self) -> None:
        self._client.meta.events.register(self.EVENT, self)

    def disarm(self) -> None:
        self._client.meta.events.unregister(self.EVENT, self)

    def __call__(self, request: AWSPreparedRequest, **kwargs: Any) -> None:
        if self.lost is not None:
            self.sent_after_loss += 1
            return
        body = request.body if isinstance(request.body, bytes) else str(request.body).encode()
        delivered = urllib.request.Request(
            request.url, data=body, headers=dict(request.headers), method=request.method
        )
        try:
            with urllib.request.urlopen(delivered, timeout=60):
                pass
        except urllib.error.HTTPError:
            return  # the condition failed: nothing applied, let botocore send it
        self.lost = body.decode()
        raise ReadTimeoutError(endpoint_url=request.url)


@pytest.fixture
def lossy(dynalite_endpoint: str) -> Iterator[tuple[CounterStore, LoseFirstAppliedResponse]]:
    """A counter store on the service's own client config (one botocore retry)."""
    client = boto3.client(
        "dynamodb", endpoint_url=dynalite_endpoint, region_name="us-east-1", config=CLIENT_CONFIG
    )
    settings = provisioned(client, fresh_settings(f"r{uuid.uuid4().hex[:8]}"))
    loss = LoseFirstAppliedResponse(client)
    yield CounterStore(client, settings.counters_table, CATEGORIES), loss
    loss.disarm()


def test_a_botocore_retry_of_a_counted_check_counts_once(
    lossy: tuple[CounterStore, LoseFirstAppliedResponse],
) -> None:
    store, loss = lossy
    service = CheckService(POLICY, store, system_clock, IDLE)
    for _ in range(3):
        service.check("demo", CheckRequest("s1", "delete_tag"))
    loss.arm()
    decision = service.check("demo", CheckRequest("s1", "delete_tag"))
    assert loss.lost is not None and loss.sent_after_loss >= 1  # botocore did retry
    assert isinstance(decision, Allowed) and decision.used == 4 and not decision.duplicate
    stored = store.get(SessionKey("demo", "s1"))
    assert stored is not None and stored.counts == {"write": 4} and len(stored.calls) == 4


@pytest.mark.parametrize("nth", [1, 2])
def test_a_botocore_retry_of_a_recorded_refusal_records_once(
    lossy: tuple[CounterStore, LoseFirstAppliedResponse], nth: int
) -> None:
    """The retry answers as the first try would have: a refusal is news (one email) only
    if it was the first at its limit."""
    store, loss = lossy
    service = CheckService(POLICY, store, system_clock, IDLE)
    for _ in range(14 + nth):
        service.check("demo", CheckRequest("s1", "delete_tag"))
    loss.arm()
    decision = service.check("demo", CheckRequest("s1", "delete_tag"))
    assert loss.lost is not None and loss.sent_after_loss >= 1
    assert isinstance(decision, Refused) and decision.first_exhaustion is (nth == 1)
    stored = store.get(SessionKey("demo", "s1"))
    assert stored is not None and stored.refused == {"write": nth}
    assert sum(c.repeats for c in stored.calls if not c.allowed) == nth  # folded: one line
    later = service.check("demo", CheckRequest("s1", "delete_tag"))
    assert isinstance(later, Refused) and not later.first_exhaustion
