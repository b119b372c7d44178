"""The session counters port on every backend (memory, moto, dynalite), through its public
interface and `CheckService`: what a check counts, refuses, records and replays."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from bench.sizing import item_size
from chalicelib.check.requests import CheckRequest
from chalicelib.check.service import CheckService
from chalicelib.errors import CallIdConflict
from chalicelib.quota.answers import Allowed, Decision, Refused
from chalicelib.quota.core import (
    Attempt,
    BudgetKey,
    ClientInfo,
    RefusalReason,
    Scope,
    SessionKey,
    SessionSnapshot,
    Verdict,
    call_id_key,
)
from chalicelib.quota.policy import POLICY_DIR, Policy, parse_policy
from chalicelib.quota.rules import explain_refusal
from chalicelib.storage.dynamodb.budgets import BudgetStore
from chalicelib.storage.dynamodb.counters import CounterStore
from chalicelib.storage.ports import Consumed, LimitChange, NotConsumed, SessionCounters
from tests.support import Backend, FixedClock, Stores

IDLE = 3600
IDLE_MS = IDLE * 1000
READS = 30  # the default policy's read limit, lowered to keep the suite fast


def _policy() -> Policy:
    document = json.loads((POLICY_DIR / "default.json").read_text())
    document["categories"]["read"]["limit"] = READS
    return parse_policy(document)


POLICY = _policy()
S1 = SessionKey("demo", "s1")


def checks(counters: SessionCounters, clock: FixedClock, keep: int = 10) -> CheckService:
    return CheckService(POLICY, counters, clock, IDLE, keep_calls=keep)


def write(session: str = "s1", **kw: Any) -> CheckRequest:
    return CheckRequest(session_id=session, tool="delete_tag", **kw)


def read(session: str = "s1", **kw: Any) -> CheckRequest:
    return CheckRequest(session_id=session, tool="search_articles", **kw)


def allowed(decision: Decision) -> Allowed:
    assert isinstance(decision, Allowed), decision
    return decision


def refused(decision: Decision) -> Refused:
    assert isinstance(decision, Refused), decision
    return decision


def change(clock: FixedClock, new_limit: int, category: str = "write") -> LimitChange:
    return LimitChange(category, new_limit, clock(), IDLE_MS)


class Wrapped:
    """A real store with one method changed by a subclass; the rest pass through."""

    def __init__(self, inner: SessionCounters) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class LostFirstResponse(Wrapped):
    """The first `consume` is applied twice and only the second answer comes back: what
    the caller sees when botocore retries a write whose response was lost after it
    applied."""

    first: Consumed | NotConsumed | None = None

    def consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        if self.first is not None:
            return self._inner.consume(attempt)
        self.first = self._inner.consume(attempt)
        return self._inner.consume(attempt)


# -- counting --------------------------------------------------------------------------


def test_counts_up_to_the_limit_then_refuses_without_passing_it(
    stores: Stores, clock: FixedClock
) -> None:
    service = checks(stores.counters, clock)
    answers = [service.check("demo", write()) for _ in range(20)]
    assert [a.allowed for a in answers] == [True] * 15 + [False] * 5
    assert [a.used for a in answers[:15]] == list(range(1, 16))
    assert all(a.used == 15 and a.limit == 15 for a in answers[15:])
    assert refused(answers[15]).reason is RefusalReason.QUOTA_EXCEEDED
    stored = stores.counters.get(S1)
    assert stored is not None
    assert stored.counts == {"write": 15} and stored.refused == {"write": 5}


def test_categories_and_sessions_and_tenants_count_separately(
    stores: Stores, clock: FixedClock
) -> None:
    service = checks(stores.counters, clock)
    for _ in range(15):
        assert service.check("demo", write()).allowed
    assert not service.check("demo", write()).allowed
    assert service.check("demo", read()).used == 1
    assert service.check("demo", write("s2")).used == 1
    assert service.check("other", write()).used == 1
    reads = [service.check("demo", read()) for _ in range(READS - 1)]
    assert reads[-1].allowed and reads[-1].used == READS
    assert not service.check("demo", read()).allowed
    assert stores.counters.get(SessionKey("other", "s1")) is not None
    assert stores.counters.get(SessionKey("other", "s2")) is None


def test_the_client_and_server_a_check_names_are_kept_across_counting_and_restart(
    stores: Stores, clock: FixedClock
) -> None:
    service = checks(stores.counters, clock)
    claude = ClientInfo(name="claude-code", version="1.0.71", oauth_client_id="agent-app")
    service.check("demo", write(server="inventory", client=claude, principal="bot"))
    service.check("demo", write())  # naming no client keeps the one named before
    stored = stores.counters.get(S1)
    assert stored is not None and (stored.server, stored.client) == ("inventory", claude)
    clock.advance(IDLE + 1)  # the idle restart writes it too
    service.check("demo", write(client=ClientInfo(name="cursor")))
    stored = stores.counters.get(S1)
    assert stored is not None and stored.client == ClientInfo(name="cursor")
    assert stored.counts == {"write": 1}
    assert service.check("demo", read(client=claude, lease=5)).allowed  # a lease's write
    stored = stores.counters.get(S1)
    assert stored is not None and stored.client == claude


def test_a_refused_attempt_names_its_server_and_client_as_a_counted_one_does(
    stores: Stores, clock: FixedClock
) -> None:
    """Every write that records an attempt names who made it, on every backend alike (the
    change is the core's, `quota.changes`): the views show the session's last caller."""
    service = checks(stores.counters, clock)
    for _ in range(15):
        service.check("demo", write(server="inventory", client=ClientInfo(name="claude-code")))
    refused = service.check("demo", write(server="tags", client=ClientInfo(name="cursor")))
    assert not refused.allowed
    stored = stores.counters.get(S1)
    assert stored is not None
    assert (stored.server, stored.client) == ("tags", ClientInfo(name="cursor"))


def test_an_unseen_session_reads_as_none(stores: Stores) -> None:
    assert stores.counters.get(SessionKey("demo", "never")) is None


def test_idle_expiry_restarts_the_counters_and_forgets_raises(
    stores: Stores, clock: FixedClock
) -> None:
    service = checks(stores.counters, clock)
    for _ in range(16):
        service.check("demo", write())
    seen = stores.counters.get(S1)
    stores.counters.raise_limit(S1, change(clock, 16), seen)
    assert service.check("demo", write()).used == 16
    assert not service.check("demo", write()).allowed
    clock.advance(IDLE - 1)  # a refused attempt restarted the idle clock
    assert not service.check("demo", write()).allowed
    clock.advance(IDLE + 1)
    again = allowed(service.check("demo", write()))
    assert again.used == 1 and again.limit == 15
    assert service.check("demo", read()).used == 1
    stored = stores.counters.get(S1)
    assert stored is not None
    assert stored.counts == {"write": 1, "read": 1}
    assert stored.raised == {} and stored.refused == {}


def test_a_call_taken_back_is_uncounted_and_shows_once_as_refused(
    stores: Stores, clock: FixedClock
) -> None:
    service = checks(stores.counters, clock)
    service.check("demo", write())
    attempt = service.attempt_for("demo", write(call_id="rpc-9"))
    consumed = stores.counters.consume(attempt)
    assert isinstance(consumed, Consumed) and consumed.snapshot.counts["write"] == 2
    stores.counters.uncount(attempt, consumed.snapshot.started_ms)
    stored = stores.counters.get(S1)
    assert stored is not None and stored.counts["write"] == 1
    assert [(c.call_id, c.allowed) for c in stored.calls] == [(None, True), ("rpc-9", False)]


@pytest.mark.parametrize("name", ["x)", "a OR b", "#pk", ":limit", "t#1"])
def test_expression_syntax_in_names_is_only_data(
    stores: Stores, clock: FixedClock, name: str
) -> None:
    service = checks(stores.counters, clock)
    decision = service.check(name, CheckRequest(session_id=f"{name} = :x", tool=name))
    assert decision.allowed and decision.used == 1
    assert service.check(name, CheckRequest(f"{name} = :x", name)).used == 2


# -- refusals --------------------------------------------------------------------------


def test_the_first_refusal_at_a_limit_is_reported_once(stores: Stores, clock: FixedClock) -> None:
    service = checks(stores.counters, clock)
    answers = [service.check("demo", write()) for _ in range(25)]
    firsts = [i for i, a in enumerate(answers) if isinstance(a, Refused) and a.first_exhaustion]
    assert firsts == [15]
    reads = [service.check("demo", read()) for _ in range(READS + 5)]
    assert [i for i, a in enumerate(reads) if isinstance(a, Refused) and a.first_exhaustion] == [
        READS
    ]
    stored = stores.counters.get(S1)
    assert stored is not None and stored.refused == {"write": 10, "read": 5}


def test_record_block_is_true_once_per_limit_and_idempotent_per_check(
    stores: Stores, clock: FixedClock
) -> None:
    counters = stores.counters
    service = checks(counters, clock)
    for _ in range(15):
        service.check("demo", write())
    first = service.attempt_for("demo", write())
    seen = counters.get(S1)
    assert seen is not None and explain_refusal(seen, first) is Verdict.OVER_LIMIT
    assert counters.record_block(first, seen, 15, suspended=False) is True
    # botocore's retry of the same write: the same answer, nothing recorded twice
    assert counters.record_block(first, seen, 15, suspended=False) is True
    after_first = counters.get(S1)
    assert after_first is not None and after_first.refused == {"write": 1}
    assert [c.allowed for c in after_first.calls].count(False) == 1
    second = service.attempt_for("demo", write())
    assert counters.record_block(second, after_first, 15, suspended=False) is False
    assert counters.record_block(second, after_first, 15, suspended=False) is False
    # a raise and a new exhaustion at the new limit is news again
    counters.raise_limit(S1, change(clock, 16), counters.get(S1))
    assert service.check("demo", write()).allowed
    assert refused(service.check("demo", write())).first_exhaustion
    stored = counters.get(S1)
    assert stored is not None and stored.refused == {"write": 3}


def test_record_block_after_the_counters_changed_asks_to_evaluate_again(
    stores: Stores, clock: FixedClock
) -> None:
    counters = stores.counters
    service = checks(counters, clock)
    for _ in range(15):
        service.check("demo", write())
    attempt = service.attempt_for("demo", write())
    seen = counters.get(S1)
    assert seen is not None
    clock.advance(1)
    counters.reset(S1, clock(), IDLE_MS)
    assert counters.record_block(attempt, seen, 15, suspended=False) is None
    stored = counters.get(S1)
    assert stored is not None and stored.refused == {}


def test_a_reset_between_refusal_and_its_record_keeps_the_next_first_exhaustion(
    stores: Stores, clock: FixedClock
) -> None:
    counters = stores.counters

    class ResetFirst(Wrapped):
        done = False

        def record_block(
            self,
            attempt: Attempt,
            seen: SessionSnapshot,
            limit: int,
            suspended: bool,
            expected: bool = False,
            marks: bool = True,
        ) -> bool | None:
            if not self.done:
                self.done = True
                counters.reset(S1, clock(), IDLE_MS)
            return counters.record_block(
                attempt, seen, limit, suspended, expected=expected, marks=marks
            )

    plain = checks(counters, clock)
    for _ in range(15):
        plain.check("demo", write())
    clock.advance(1)
    racing = checks(ResetFirst(counters), clock)
    assert racing.check("demo", write()).used == 1  # evaluated again after the reset
    answers = [plain.check("demo", write()) for _ in range(15)]
    assert refused(answers[-1]).first_exhaustion


# -- idempotency of the check's own writes ---------------------------------------------


def test_consume_twice_with_one_attempt_counts_once(stores: Stores, clock: FixedClock) -> None:
    counters = stores.counters
    service = checks(counters, clock)
    service.check("demo", write())
    attempt = service.attempt_for("demo", write())
    assert isinstance(counters.consume(attempt), Consumed)
    again = counters.consume(attempt)
    assert isinstance(again, NotConsumed) and again.snapshot is not None
    assert explain_refusal(again.snapshot, attempt) is Verdict.ALREADY_COUNTED
    stored = counters.get(S1)
    assert stored is not None and stored.counts == {"write": 2} and len(stored.calls) == 2


@pytest.mark.parametrize("call_id", [None, "rpc-1"])
def test_a_check_whose_first_write_answer_was_lost_is_allowed_and_counted_once(
    stores: Stores, clock: FixedClock, call_id: str | None
) -> None:
    checks(stores.counters, clock).check("demo", write())
    lossy = LostFirstResponse(stores.counters)
    service = checks(lossy, clock)
    decision = allowed(service.check("demo", write(call_id=call_id)))
    assert isinstance(lossy.first, Consumed)
    assert decision.used == 2
    stored = stores.counters.get(S1)
    assert stored is not None and stored.counts == {"write": 2}
    assert [c.allowed for c in stored.calls if not c.replay] == [True, True]
    if call_id is None:  # with a call id, the retry reads as the client's own replay
        assert not decision.duplicate and len(stored.calls) == 2


def test_record_replay_twice_with_one_attempt_records_once(
    stores: Stores, clock: FixedClock
) -> None:
    counters = stores.counters
    service = checks(counters, clock)
    service.check("demo", write(call_id="rpc-1"))
    retry = service.attempt_for("demo", write(call_id="rpc-1"))
    seen = counters.get(S1)
    assert seen is not None and explain_refusal(seen, retry) is Verdict.DUPLICATE
    assert counters.record_replay(retry, seen) is True
    assert counters.record_replay(retry, seen) is True
    stored = counters.get(S1)
    assert stored is not None
    assert [(c.allowed, c.replay) for c in stored.calls] == [(True, False), (True, True)]
    # one replay used, two left; then the id is used up
    answers = [service.check("demo", write(call_id="rpc-1")) for _ in range(2)]
    assert [allowed(a).duplicate for a in answers] == [True, True]
    assert [a.used for a in answers] == [1, 1]
    with pytest.raises(CallIdConflict):
        service.check("demo", write(call_id="rpc-1"))


def test_record_replay_after_the_counters_changed_is_refused(
    stores: Stores, clock: FixedClock
) -> None:
    counters = stores.counters
    service = checks(counters, clock)
    service.check("demo", write(call_id="rpc-1"))
    retry = service.attempt_for("demo", write(call_id="rpc-1"))
    seen = counters.get(S1)
    assert seen is not None
    clock.advance(1)
    counters.reset(S1, clock(), IDLE_MS)
    assert counters.record_replay(retry, seen) is False


# -- client retries (call ids) ---------------------------------------------------------


def test_a_retry_with_the_same_call_id_is_counted_once(stores: Stores, clock: FixedClock) -> None:
    service = checks(stores.counters, clock)
    first = allowed(service.check("demo", write(call_id="rpc-1")))
    retry = allowed(service.check("demo", write(call_id="rpc-1")))
    other = allowed(service.check("demo", write(call_id="rpc-2")))
    assert not first.duplicate and first.used == 1
    assert retry.duplicate and retry.used == 1
    assert not other.duplicate and other.used == 2


def test_a_reused_call_id_is_replayed_at_most_three_times_then_refused_uncounted(
    stores: Stores, clock: FixedClock
) -> None:
    """Issue 28, class 2: an id names one call; a loop on it runs once, gets at most
    three duplicates, and is then answered 409, counted nowhere, however long it runs."""
    service = checks(stores.counters, clock)
    answers: list[Decision | CallIdConflict] = []
    for _ in range(60):
        try:
            answers.append(service.check("demo", write(call_id="turn-1")))
        except CallIdConflict as exc:
            answers.append(exc)
    duplicates = [isinstance(a, Allowed) and a.duplicate for a in answers]
    assert duplicates[:5] == [False, True, True, True, False]
    assert all(isinstance(a, CallIdConflict) for a in answers[4:])
    stored = stores.counters.get(S1)
    assert stored is not None and stored.counts.get("write") == 1


def test_a_call_id_is_not_replayed_after_sixty_seconds(stores: Stores, clock: FixedClock) -> None:
    service = checks(stores.counters, clock)
    service.check("demo", write(call_id="x"))
    clock.advance(59)
    assert allowed(service.check("demo", write(call_id="x"))).duplicate
    clock.advance(2)
    with pytest.raises(CallIdConflict):  # too late for a retry: a new call needs a new id
        service.check("demo", write(call_id="x"))
    assert allowed(service.check("demo", write(call_id="y"))).used == 2


def test_a_refused_call_id_is_evaluated_anew_then_replayed_once_counted(
    stores: Stores, clock: FixedClock
) -> None:
    service = checks(stores.counters, clock)
    for i in range(15):
        service.check("demo", write(call_id=f"ok-{i}"))
    assert not service.check("demo", write(call_id="late")).allowed
    stores.counters.raise_limit(S1, change(clock, 20), stores.counters.get(S1))
    retried = allowed(service.check("demo", write(call_id="late")))
    assert not retried.duplicate and retried.used == 16 and retried.limit == 20
    again = allowed(service.check("demo", write(call_id="late")))  # a retry of that answer
    assert again.duplicate and again.used == 16


# -- last calls ------------------------------------------------------------------------


@pytest.mark.parametrize("keep", [1, 4, 10])
def test_last_calls_are_kept_to_the_configured_number(
    stores: Stores, clock: FixedClock, keep: int
) -> None:
    counters = stores.keeping(keep)
    service = checks(counters, clock, keep=keep)
    batch = max(1, keep // 2)
    for i in range(3 * keep + 7):
        clock.advance(1)
        tool = f"get_{i}" if i % 3 else f"delete_{i}"
        decision = service.check("demo", CheckRequest("s1", tool, principal="ed@example.com"))
        shown = decision.last_calls
        assert len(shown) == min(i + 1, keep)
        assert shown[-1].tool == tool and shown[-1].at_ms == clock()
        assert [c.at_ms for c in shown] == sorted(c.at_ms for c in shown)
        stored = counters.get(S1)
        assert stored is not None
        assert min(i + 1, keep) <= len(stored.calls) <= keep + batch - 1
        assert stored.calls[-1].tool == tool


def test_last_calls_show_refusals_and_the_principal(stores: Stores, clock: FixedClock) -> None:
    service = checks(stores.counters, clock, keep=3)
    for _ in range(16):
        clock.advance(1)
        decision = service.check("demo", write(principal="ed@example.com"))
    shown = refused(decision).last_calls
    assert [c.allowed for c in shown] == [True, True, False]
    assert {c.principal for c in shown} == {"ed@example.com"}


def test_the_stored_session_stays_small(backend: Backend, clock: FixedClock) -> None:
    """Emulators only: the item's size is what DynamoDB bills every check for."""
    categories = tuple(POLICY.categories)
    counters = CounterStore(backend.client, backend.settings.counters_table, categories, 10)
    service = checks(counters, clock)
    for i in range(60):
        clock.advance(1)
        principal = "editor@example.com"
        request = read() if i % 2 else write(principal=principal, call_id=f"{i:036d}")
        service.check("demo", request)
    items = backend.client.scan(TableName=backend.settings.counters_table)["Items"]
    assert len(items) == 1
    assert item_size(items[0]) <= 1024  # one write unit, with the 10 exact last calls
    stored = counters.get(S1)
    assert stored is not None and len(stored.calls) == 10


def test_a_runaway_loop_is_one_line_of_the_last_calls(stores: Stores, clock: FixedClock) -> None:
    """385 refusals of the same tool fold into one record with a count: the loop shows at
    a glance, and the calls before it stay in the record."""
    service = checks(stores.counters, clock)
    for i in range(16):
        clock.advance(1)
        allowed(service.check("demo", write() if i < 15 else read()))
    for _ in range(385):
        clock.advance(1)
        last = refused(service.check("demo", write()))
    stored = stores.counters.get(S1)
    assert stored is not None and stored.refused == {"write": 385}
    loop = stored.calls[-1]
    assert (loop.tool, loop.allowed, loop.repeats, loop.at_ms) == (
        "delete_tag",
        False,
        385,
        clock(),
    )
    assert loop.to_json()["repeats"] == 385
    assert [c.allowed for c in stored.calls] == [True] * 9 + [False]
    assert stored.calls[-2].tool == "search_articles"
    assert last.last_calls[-1].repeats == 385 and len(last.last_calls) == 10
    clock.advance(1)
    allowed(service.check("demo", read()))  # another tool ends the run
    clock.advance(1)
    again = refused(service.check("demo", write()))
    assert [(c.tool, c.repeats) for c in again.last_calls[-3:]] == [
        ("delete_tag", 385),
        ("search_articles", 1),
        ("delete_tag", 1),
    ]


def test_a_check_costs_one_request_and_a_runaway_loops_refusal_one(
    backend: Backend, clock: FixedClock
) -> None:
    """Requests to DynamoDB per check, counted at the client: an allowed check is one
    UpdateItem once the container has seen the session (no trims); once the container
    has seen the session spent, each further refusal is one guarded UpdateItem that
    records it (no failed update first, so no GetItem on dynalite either). With a
    principal, its streak is the one more request."""
    sent: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        sent[model.name] += 1

    backend.client.meta.events.register("before-call.dynamodb", count)
    categories = tuple(POLICY.categories)
    counters = CounterStore(backend.client, backend.settings.counters_table, categories, 10)
    service = checks(counters, clock)
    allowed(service.check("demo", write()))
    sent.clear()
    for i in range(READS):
        clock.advance(1)
        allowed(service.check("demo", read(call_id=f"r{i}")))
    assert sent == {"UpdateItem": READS}
    for _ in range(14):
        allowed(service.check("demo", write()))
    refused(service.check("demo", write()))  # the first at its limit also marks it: 3
    sent.clear()
    for _ in range(50):
        clock.advance(1)
        refused(service.check("demo", write()))
    assert sent == Counter({"UpdateItem": 50})


def test_a_runaway_loop_with_a_principal_costs_two_requests_a_refusal(
    backend: Backend, clock: FixedClock
) -> None:
    """The incident's loop, with its principal: after the first refusal, each refusal is
    the session's guarded record and the principal's streak, two UpdateItems, however
    long the loop runs; the escalation still comes at suspend_after_refusals."""
    table = backend.settings.counters_table
    counters = CounterStore(backend.client, table, tuple(POLICY.categories), 10)
    budgets = BudgetStore(backend.client, table)
    service = CheckService(POLICY, counters, clock, IDLE, keep_calls=10, budgets=budgets)
    sent: Counter[str] = Counter()
    backend.client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: sent.update([model.name])
    )
    for _ in range(15):
        clock.advance(1)
        allowed(service.check("demo", write(principal="bot")))
    clock.advance(1)
    refused(service.check("demo", write(principal="bot")))  # the first: seen, marked
    sent.clear()
    for _ in range(40):
        clock.advance(1)
        decision = refused(service.check("demo", write(principal="bot")))
    # (and the principal's suspension, read again when its 30-second cache expires)
    assert sent["UpdateItem"] == 80 and sent["GetItem"] <= 40 // 30 + 1
    assert decision.reason is RefusalReason.QUOTA_EXCEEDED and not decision.escalated
    for _ in range(9):  # the 50th refusal in a row suspends the principal
        clock.advance(1)
        decision = refused(service.check("demo", write(principal="bot")))
    assert decision.escalated


def test_refusals_by_a_wider_budget_do_not_grow_the_stored_session(
    backend: Backend, clock: FixedClock
) -> None:
    """An agent whose principal budget is spent keeps calling on a session with room
    left: each call is counted at the session, refused by the principal and taken back.
    The taken-back call replaces its own record in place, so the item stays one write
    unit however long the loop runs, and the session's count is back where it was."""
    document = json.loads((POLICY_DIR / "default.json").read_text())
    document["categories"]["write"]["principal"] = {"limit": 20, "window": "24h"}
    document["suspend_after_refusals"] = 1_000_000  # no escalation: every call tries
    policy = parse_policy(document)
    counters = CounterStore(
        backend.client, backend.settings.counters_table, tuple(policy.categories), 10
    )
    budgets = BudgetStore(backend.client, backend.settings.counters_table)
    service = CheckService(policy, counters, clock, 3600, keep_calls=10, budgets=budgets)
    sent: Counter[str] = Counter()
    backend.client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: sent.update([model.name])
    )
    for i in range(20):  # 15 in another session, 5 in this one: the principal's 20
        clock.advance(1)
        session = "s0" if i < 15 else "s1"
        allowed(service.check("demo", write(session, principal="bot", call_id=f"c-{i}")))
    requests: list[int] = []
    for i in range(200):
        clock.advance(1)
        before = Counter(sent)
        decision = refused(service.check("demo", write(principal="bot", call_id=f"r-{i}")))
        made = sent - before
        requests.append(made["UpdateItem"] + made["PutItem"])
        assert decision.scope is Scope.PRINCIPAL
    items = backend.client.scan(TableName=backend.settings.counters_table)["Items"]
    session_item = next(item for item in items if item["pk"]["S"] == "demo#s1")
    assert item_size(session_item) <= 1024
    stored = counters.get(S1)
    assert stored is not None
    assert stored.counts["write"] == 5
    assert len(session_item["cids"]["L"]) == 10  # the exact last 10, shown folded:
    assert [(c.allowed, c.repeats, c.call_id) for c in stored.calls] == [(False, 10, "r-199")]
    # Writes per refusal, after the first (which also writes its audit events): the
    # session step, the principal's refusal, the give-back in place and the principal's
    # refusal streak; never a trim. (The principal's suspension and the tenant's grants
    # are read again each time their 30-second caches expire.)
    assert set(requests[1:]) == {4}


def test_a_taken_back_call_id_folded_out_of_the_record_is_counted_anew(
    stores: Stores, clock: FixedClock
) -> None:
    """Found by `make fuzz` on dynalite: a call taken back (a wider budget refused it)
    whose refused record a later refusal folded away. The store still held its counted
    entry while the record no longer showed it, so the rule held on the record and failed
    in the store, round after round: the retry was a 503. What the store holds is what
    the rule reads; the retry is counted anew."""
    counters = stores.counters
    service = checks(counters, clock)

    def attempt(check_id: str, call_id: str | None, tool: str = "delete_tag") -> Attempt:
        category = "write" if tool == "delete_tag" else "read"
        return Attempt(S1, tool, category, 15, clock(), IDLE_MS, check_id, call_id=call_id)

    first = attempt("k1", "c2")
    counted = counters.consume(first)
    assert isinstance(counted, Consumed)
    clock.advance(1)
    assert isinstance(counters.consume(attempt("k2", None, "search_articles")), Consumed)
    counters.uncount(first, counted.snapshot.started_ms)  # the wider budget refused it
    clock.advance(1)
    seen = counters.get(S1)
    assert seen is not None
    assert counters.record_block(attempt("k3", "c3"), seen, 15, suspended=False) is not None
    clock.advance(1)
    retry = service.check("demo", write(call_id="c2"))
    assert isinstance(retry, Allowed) and not retry.duplicate
    stored = counters.get(S1)
    assert stored is not None and stored.counts["write"] == 1


def test_an_allowed_call_before_an_idle_restart_still_ends_the_principals_run(
    stores: Stores, clock: FixedClock
) -> None:
    """Found by `make fuzz`: a session suspended by an administrator went idle; another
    principal's (refused) attempt started its counters and its last calls again, and with
    them went the record of this principal's allowed call there. Its next refusal there
    then counted as its run going on, and it was suspended a refusal early. When the last
    allowed call of each category was is now kept across the restart: the run in that
    category starts again; an allowed call in another category (escalation misses the
    incident's own pattern) never ends it."""
    service = CheckService(POLICY, stores.counters, clock, IDLE, budgets=stores.budgets)
    bob = BudgetKey.principal("demo", "bob")
    for _ in range(READS):
        allowed(service.check("demo", read("s1", principal="bob")))
    refused(service.check("demo", read("s1", principal="bob")))  # the run of reads: 1
    clock.advance(1)
    allowed(service.check("demo", read("s2", principal="bob")))  # the run ends here
    allowed(service.check("demo", write("s3", principal="bob")))  # not here: a write
    for session in ("s2", "s3"):
        stores.counters.suspend(SessionKey("demo", session), "looks odd", clock())
    clock.advance(IDLE + 1)
    refused(service.check("demo", write("s2", principal="alice")))  # restarts s2
    refused(service.check("demo", read("s2", principal="bob")))  # a new run: 1
    seen = stores.budgets.get(bob)
    assert seen is not None and seen.streak("read") == 1
    clock.advance(1)
    refused(service.check("demo", write("s3", principal="alice")))  # restarts s3
    refused(service.check("demo", read("s3", principal="bob")))  # the run goes on: 2
    seen = stores.budgets.get(bob)
    assert seen is not None and seen.streaks == {"read": 2}


def test_a_call_in_progress_keeps_its_life_when_later_calls_push_its_record_out(
    stores: Stores, clock: FixedClock
) -> None:
    """Found by `make bench` (8 clients on one session, 32 writes, limit 15): while a
    check waited on the wider budgets, more calls of its session than the last calls
    keep were counted or refused, its record left the list, and the next count dropped
    its life as gone. Its admission then found no life: the check failed after every
    budget had counted the call. A life stays while its check may still be running."""
    counters = stores.counters

    def attempt(n: int) -> Attempt:
        return Attempt(
            S1, "delete_tag", "write", 15, clock(), IDLE_MS, f"k{n}", call_id=f"c{n}", wider=True
        )

    first = attempt(0)
    counted = counters.consume(first)
    assert isinstance(counted, Consumed)
    life = counted.snapshot.lives[call_id_key("c0")]
    for n in range(1, 13):  # more than the 10 last calls kept
        clock.advance(0.01)
        assert isinstance(counters.consume(attempt(n)), Consumed)

    assert counters.admit(first, life)
    stored = counters.get(S1)
    assert stored is not None and stored.lives[call_id_key("c0")] == life.admitted()


def test_a_copy_of_a_call_in_progress_is_not_counted_once_its_record_left_the_list(
    stores: Stores, clock: FixedClock
) -> None:
    """Found in review: as above, and the client sends the call again meanwhile (its own
    retry, within the life's 10 s): the copy must not be counted."""
    counters = stores.counters

    def attempt(n: int, call_id: str) -> Attempt:
        return Attempt(
            S1, "delete_tag", "write", 50, clock(), IDLE_MS, f"k{n}", call_id=call_id, wider=True
        )

    first = attempt(0, "c0")
    counted = counters.consume(first)
    assert isinstance(counted, Consumed)
    life = counted.snapshot.lives[call_id_key("c0")]
    for n in range(1, 13):
        clock.advance(0.01)
        assert isinstance(counters.consume(attempt(n, f"c{n}")), Consumed)
    clock.advance(0.5)

    assert not isinstance(counters.consume(attempt(99, "c0")), Consumed)
    assert counters.admit(first, life)
