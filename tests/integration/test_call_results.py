"""The call-results port (exactly-once writes) on every backend: first write wins, also
under 8 concurrent stores; an expired result is free again; reads give back what was
kept. Through the port only, never asserting attribute names."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from chalicelib.quota.results import CallResult, CallResults, ResultKey, kept
from chalicelib.storage.dynamodb.results import ResultStore
from chalicelib.storage.memory.tables import MemoryResults
from tests.conftest import _backend

KEY = ResultKey("demo", "s1", "call-1")
NOW = 1_800_000_000_000
KEEP = 3_600_000


def _results(request: pytest.FixtureRequest) -> Iterator[CallResults]:
    if request.param == "memory":
        yield MemoryResults()
        return
    for backend in _backend(request, request.param):
        yield ResultStore(backend.client, backend.settings.counters_table)


@pytest.fixture(params=["memory", "moto", "dynalite"])
def results(request: pytest.FixtureRequest) -> Iterator[CallResults]:
    yield from _results(request)


# In-process moto applies an update in steps, not atomically: a concurrent reader can see
# an item half written. The concurrency suites run where writes are atomic, as DynamoDB's.
@pytest.fixture(params=["memory", "dynalite"])
def atomic_results(request: pytest.FixtureRequest) -> Iterator[CallResults]:
    yield from _results(request)


def result(text: str, now: int = NOW, key: ResultKey = KEY) -> CallResult:
    return kept(key, "delete_tag", {"content": [{"type": "text", "text": text}]}, now, KEEP)


def test_the_first_write_wins(results: CallResults) -> None:
    """Defect class: a later store overwrites the result a retry was promised."""
    first = result("first")
    assert results.put_first(first) is None
    winner = results.put_first(result("second"))
    assert winner is not None and winner.digest == first.digest
    assert results.get(KEY) == first
    assert results.get(ResultKey("demo", "s2", "call-1")) is None


def test_an_expired_result_is_free_again(results: CallResults) -> None:
    """Defect class: correctness left to TTL deletion, which can lag by days."""
    assert results.put_first(result("old")) is None
    later = result("new", NOW + KEEP)
    assert results.put_first(later) is None
    assert results.get(KEY) == later


def test_a_cut_result_keeps_digest_and_size(results: CallResults) -> None:
    """Defect class: a large result stored whole (item limits) or lost without a trace."""
    big = result("x" * (65 * 1024))
    assert big.truncated and results.put_first(big) is None
    assert results.get(KEY) == big


def test_of_eight_concurrent_stores_exactly_one_wins(atomic_results: CallResults) -> None:
    """Defect class: check-then-write lets two stores of one call id both win."""
    results = atomic_results
    mine = [result(f"run {i}") for i in range(8)]
    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(results.put_first, mine))
    won = [r for r, o in zip(mine, outcomes, strict=True) if o is None]
    assert len(won) == 1
    assert all(o is None or o.digest == won[0].digest for o in outcomes)
    assert results.get(KEY) == won[0]
