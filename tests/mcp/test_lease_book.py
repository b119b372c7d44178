"""The client's lease bookkeeping on its own: sizes, local spending, expiry, idle returns,
and what a refusal or a suspension empties. No I/O; the clock is moved by hand."""

from __future__ import annotations

from typing import Any

from mcp_quota_client import CheckRequest, Decision, Outcome
from mcp_quota_client.leases import LeaseBook, LeaseReturn

READ = CheckRequest(session_id="s", tool="search", annotations={"readOnlyHint": True})
WRITE = CheckRequest(session_id="s", tool="delete_tag")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def answer(request: CheckRequest, granted: int | None, **kw: Any) -> Decision:
    raw: dict[str, Any] = {}
    if granted is not None:
        raw["lease"] = {
            "id": f"read.chk{granted}.{granted}.0.0",
            "granted": granted,
            "lease_seconds": 30,
            "lease_max": 10,
        }
    options: dict[str, Any] = {
        "allowed": True,
        "outcome": Outcome.ALLOWED,
        "session_id": request.session_id,
        "tool": request.tool,
        "message": "ok",
        "category": "read" if granted is not None else "write",
        "raw": raw,
    }
    options.update(kw)
    return Decision(**options)


def spend_all(book: LeaseBook, request: CheckRequest) -> int:
    spent = 0
    while book.take(request) is not None:
        spent += 1
    return spent


def test_sizes_double_as_leases_are_spent_up_to_lease_max() -> None:
    book = LeaseBook(Clock(), idle_seconds=30, margin_seconds=1)
    sizes = []
    for _ in range(6):
        size = book.size(READ)
        assert size is not None
        sizes.append(size)
        book.learn(READ, answer(READ, size))
        assert spend_all(book, READ) == size - 1
    assert sizes == [2, 4, 8, 10, 10, 10]


def test_a_local_decision_says_it_came_from_a_lease() -> None:
    book = LeaseBook(Clock(), idle_seconds=30, margin_seconds=1)
    assert book.take(READ) is None  # nothing learned yet
    book.learn(READ, answer(READ, 2, used=2, limit=200, remaining=198))
    local = book.take(READ)
    assert local is not None and local.allowed and local.from_lease
    assert (local.used, local.limit, local.attempts, local.http_status) == (2, 200, 0, None)


def test_writes_are_learned_as_never_leased() -> None:
    book = LeaseBook(Clock(), idle_seconds=30, margin_seconds=1)
    assert book.size(WRITE) == 2  # not classified yet
    book.learn(WRITE, answer(WRITE, None))
    assert book.size(WRITE) is None and book.take(WRITE) is None


def test_a_refusal_empties_the_lease_and_the_next_one_is_of_one_call() -> None:
    book = LeaseBook(Clock(), idle_seconds=30, margin_seconds=1)
    book.learn(READ, answer(READ, 2))
    book.learn(READ, answer(READ, 4))  # a parallel call's lease: 3 more
    refused = answer(READ, None, allowed=False, outcome=Outcome.QUOTA_EXCEEDED, category="read")
    assert book.learn(READ, refused) == [
        LeaseReturn("s", "read.chk2.2.0.0", 1),
        LeaseReturn("s", "read.chk4.4.0.0", 3),
    ]
    assert book.take(READ) is None and book.size(READ) == 1


def test_a_suspension_empties_every_lease_of_the_session() -> None:
    book = LeaseBook(Clock(), idle_seconds=30, margin_seconds=1)
    other = CheckRequest(session_id="t", tool="search", annotations={"readOnlyHint": True})
    book.learn(READ, answer(READ, 4))
    book.learn(other, answer(other, 4))
    suspended = answer(
        WRITE, None, allowed=False, outcome=Outcome.SESSION_SUSPENDED, category="write"
    )
    assert book.learn(WRITE, suspended) == [LeaseReturn("s", "read.chk4.4.0.0", 3)]
    assert book.take(READ) is None and book.take(other) is not None


def test_leases_expire_before_lease_seconds_and_idle_ones_go_back() -> None:
    clock = Clock()
    book = LeaseBook(clock, idle_seconds=10, margin_seconds=1)
    book.learn(READ, answer(READ, 10))
    clock.now += 9
    assert book.take(READ) is not None and book.due() == []
    clock.now += 9.5  # 18.5 s: idle for 9.5 s, not yet 10
    assert book.due() == []
    clock.now += 0.5
    assert book.due() == [LeaseReturn("s", "read.chk10.10.0.0", 8)]
    book.learn(READ, answer(READ, 10))
    clock.now += 29  # 1 s of margin before the service's 30 s
    assert book.take(READ) is None
    assert book.due() == [LeaseReturn("s", "read.chk10.10.0.0", 9)]
    book.learn(READ, answer(READ, 10))
    assert book.unspent() == 9
    assert book.drain() == [LeaseReturn("s", "read.chk10.10.0.0", 9)]
    assert book.unspent() == 0
