"""What `make bench` measures against ours and the naive counter, on one backend at a time.

Ours is the service's `CheckService` as the container builds it (classification, grant
cache, block reporter, counter store). The naive counter is the read-then-write quota a
hand-rolled service typically starts with. Both run on the same client and tables.
"""

from __future__ import annotations

import functools
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from moto import mock_aws

from bench.sizing import item_size, write_units
from chalicelib.aws import CLIENT_CONFIG
from chalicelib.check.requests import CheckRequest
from chalicelib.quota.answers import Refused
from chalicelib.settings import Settings
from chalicelib.wiring import Container
from tests.support import client_for, fake_aws_env, fresh_settings, provisioned

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

TENANT = "acme-prod"
PRINCIPAL = "editor@example.com"
BENCH_POLICY = Path(__file__).resolve().parent / "policy.json"
READ_TOOLS = ("search_articles", "get_article", "list_tags")
WRITE_TOOLS = ("delete_tag", "update_article", "publish_article")
READ_LIMIT = 200
WRITE_LIMIT = 15
PRINCIPAL_WRITES = 90  # writes per principal in the allowed-write workload (budget: 100)


@dataclass
class Backend:
    """One DynamoDB implementation with fresh tables and a container for our service."""

    name: str
    client: DynamoDBClient  # the naive counter's (boto3's defaults), and set-up
    settings: Settings
    container: Container
    ours: DynamoDBClient  # the service's own client configuration (aws.CLIENT_CONFIG)


@contextmanager
def backend(name: str, endpoint: str | None, pool: int = 80) -> Iterator[Backend]:
    """Fresh tables on moto in-process (endpoint None) or on a DynamoDB-API endpoint."""
    fake_aws_env()
    context = mock_aws() if endpoint is None else _nothing()
    with context:
        client = client_for(endpoint, pool=pool)
        settings = provisioned(client, fresh_settings(f"b{uuid.uuid4().hex[:8]}"))
        # Escalation off: the refused workloads keep refusing at the session, as measured
        # (with it, the principal is suspended after 50 refusals and then refused at no
        # cost at all, before any request).
        settings = replace(settings, grant_cache_seconds=3600, policy=str(BENCH_POLICY))
        container = Container(settings=settings)
        ours = client_for(endpoint, pool=pool, base=CLIENT_CONFIG)
        container.__dict__["dynamodb"] = ours
        yield Backend(name, client, settings, container, ours)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def session_id() -> str:
    """An MCP-style session id."""
    return f"mcp-session-{uuid.uuid4()}"


def write_request(
    session: str, i: int = 0, call_id: bool = True, principal: str | None = None
) -> CheckRequest:
    # One principal per session unless given: a principal shared by all the bench's
    # sessions would meet its own budget (100 writes a day).
    return CheckRequest(
        session_id=session,
        tool=WRITE_TOOLS[i % len(WRITE_TOOLS)],
        principal=principal or f"{PRINCIPAL}/{session}",
        call_id=str(uuid.uuid4()) if call_id else None,
    )


def read_request(session: str, i: int = 0) -> CheckRequest:
    return CheckRequest(
        session_id=session,
        tool=READ_TOOLS[i % len(READ_TOOLS)],
        principal=PRINCIPAL,
        call_id=str(uuid.uuid4()),
    )


# -- the naive counter -----------------------------------------------------------------


class NaiveCounter:
    """Read the count, compare, write count+1: two requests, and a race between them."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    def check(self, session: str, category: str, limit: int) -> bool:
        key = {"pk": {"S": f"naive#{session}#{category}"}}
        item = self._client.get_item(TableName=self._table, Key=key, ConsistentRead=True)
        used = int(item.get("Item", {}).get("n", {"N": "0"})["N"])
        if used >= limit:
            return False
        self._client.put_item(TableName=self._table, Item={**key, "n": {"N": str(used + 1)}})
        return True


class AtomicCounter:
    """The least a safe counter can do in one request: one conditional UpdateItem (add one
    while under the limit). No audit trail, no exactly-once, no budget above the session:
    the floor under any one-request check, ours included."""

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._client = client
        self._table = table

    def check(self, session: str, category: str, limit: int) -> bool:
        try:
            self._client.update_item(
                TableName=self._table,
                Key={"pk": {"S": f"atomic#{session}#{category}"}},
                UpdateExpression="ADD #n :one",
                ConditionExpression="attribute_not_exists(#n) OR #n < :limit",
                ExpressionAttributeNames={"#n": "n"},
                ExpressionAttributeValues={":one": {"N": "1"}, ":limit": {"N": str(limit)}},
                ReturnValues="NONE",
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return False
        return True


# -- requests and write units ----------------------------------------------------------


class RequestLog:
    """DynamoDB requests by operation, from botocore's own `before-call` events."""

    def __init__(self, *clients: DynamoDBClient) -> None:
        self.ops: Counter[str] = Counter()
        self._lock = threading.Lock()
        for client in clients:
            client.meta.events.register("before-call.dynamodb", self._seen)

    def _seen(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.ops[model.name] += 1

    def take(self) -> Counter[str]:
        """The requests since the last take."""
        with self._lock:
            taken, self.ops = self.ops, Counter()
        return taken


@dataclass
class Cost:
    """What one kind of check costs in DynamoDB requests and write units."""

    allowed_checks: int = 0
    allowed_requests: Counter[str] = field(default_factory=Counter)
    allowed_wcu: int = 0
    blocked_checks: int = 0
    blocked_requests: Counter[str] = field(default_factory=Counter)
    blocked_wcu: int = 0
    first_block_requests: Counter[str] = field(default_factory=Counter)
    max_item_bytes: int = 0
    calls_in_record: int = 0
    # category -> [allowed checks, their requests]
    allowed_by_category: dict[str, list[int]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        def per(requests: Counter[str], n: int) -> float:
            return round(sum(requests.values()) / n, 3) if n else 0.0

        return {
            "allowed_checks": self.allowed_checks,
            "requests_per_allowed": per(self.allowed_requests, self.allowed_checks),
            "allowed_requests_by_op": dict(self.allowed_requests),
            "wcu_per_allowed": round(self.allowed_wcu / max(1, self.allowed_checks), 3),
            "blocked_checks": self.blocked_checks,
            "requests_per_blocked": per(self.blocked_requests, self.blocked_checks),
            "blocked_requests_by_op": dict(self.blocked_requests),
            "wcu_per_blocked": round(self.blocked_wcu / max(1, self.blocked_checks), 3),
            "first_block_requests_by_op": dict(self.first_block_requests),
            "max_item_bytes": self.max_item_bytes,
            "calls_in_record_at_max": self.calls_in_record,
            "requests_per_allowed_by_category": {
                category: round(requests / checks, 3)
                for category, (checks, requests) in sorted(self.allowed_by_category.items())
            },
        }


def _raw_item(reader: DynamoDBClient, table: str, key: str) -> dict[str, Any]:
    response = reader.get_item(TableName=table, Key={"pk": {"S": key}}, ConsistentRead=True)
    item: dict[str, Any] = response.get("Item", {})
    return item


def cost_of_ours(b: Backend, endpoint: str | None) -> Cost:
    """A session's life: 200 reads and 15 writes interleaved, then 10 refused writes.

    Each check's write units come from the item's before/after sizes (read back on a
    second, uncounted client); the trim of the last-calls record counts as its own write.
    """
    reader = client_for(endpoint)  # on moto in-process, the same mock answers it
    checks = b.container.checks
    checks.attempt_for(TENANT, read_request("warm"))  # the grant cache: one Query per tenant
    log = RequestLog(b.ours)
    log.take()
    session = session_id()
    key = f"{TENANT}#{session}"
    cost = Cost()
    before = _raw_item(reader, b.settings.counters_table, key)
    plan = [read_request(session, i) for i in range(READ_LIMIT)]
    for i in range(WRITE_LIMIT):
        plan.insert(i * 13 + 5, write_request(session, i))
    plan += [write_request(session, i) for i in range(10)]
    for request in plan:
        decision = checks.check(TENANT, request)
        ops = log.take()
        after = _raw_item(reader, b.settings.counters_table, key)
        # Every write here lands on this item (a failed condition costs the same units).
        units = (ops["UpdateItem"] + ops["PutItem"]) * write_units(before, after)
        size = item_size(after)
        if size > cost.max_item_bytes:
            cost.max_item_bytes, cost.calls_in_record = size, len(after["calls"]["L"])
        if decision.allowed:
            cost.allowed_checks += 1
            cost.allowed_requests += ops
            cost.allowed_wcu += units
            tally = cost.allowed_by_category.setdefault(decision.category, [0, 0])
            tally[0] += 1
            tally[1] += sum(ops.values())
        elif isinstance(decision, Refused) and decision.first_exhaustion:  # + the audit event
            cost.first_block_requests += ops
        else:
            cost.blocked_checks += 1
            cost.blocked_requests += ops
            cost.blocked_wcu += units
        before = after
    return cost


def cost_of_naive(b: Backend) -> Cost:
    """The naive counter over the same plan: GetItem + PutItem, or GetItem alone."""
    naive = NaiveCounter(b.client, b.settings.counters_table)
    log = RequestLog(b.client)
    session = session_id()
    cost = Cost()
    plan = [("read", READ_LIMIT)] * READ_LIMIT + [("write", WRITE_LIMIT)] * (WRITE_LIMIT + 10)
    for category, limit in plan:
        allowed = naive.check(session, category, limit)
        ops = log.take()
        if allowed:
            cost.allowed_checks += 1
            cost.allowed_requests += ops
            cost.allowed_wcu += ops["PutItem"]
        else:
            cost.blocked_checks += 1
            cost.blocked_requests += ops
    item = _raw_item(b.client, b.settings.counters_table, f"naive#{session}#write")
    cost.max_item_bytes = item_size(item)
    return cost


# -- latency and throughput ------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Latency percentiles (ms) and throughput of a run of checks."""

    clients: int
    checks: int
    p50_ms: float
    p99_ms: float
    per_second: float
    allowed: int

    def as_json(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "checks": self.checks,
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
            "checks_per_second": round(self.per_second, 1),
            "allowed": self.allowed,
        }


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass
class Samples:
    """Per-check latencies (ms) and wall time of one or more runs of the same workload."""

    clients: int
    latencies_ms: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0
    allowed: int = 0

    def add(self, other: Samples) -> None:
        """Fold in another run (a later round of the same workload)."""
        self.latencies_ms += other.latencies_ms
        self.elapsed_s += other.elapsed_s
        self.allowed += other.allowed

    def timing(self) -> Timing:
        return Timing(
            clients=self.clients,
            checks=len(self.latencies_ms),
            p50_ms=statistics.median(self.latencies_ms),
            p99_ms=percentile(self.latencies_ms, 99),
            per_second=len(self.latencies_ms) / self.elapsed_s,
            allowed=self.allowed,
        )


def sampled(check: Callable[[int, int], bool], clients: int, per_client: int) -> Samples:
    """Run `check(client, i)` per_client times on each of `clients` threads, all at once."""
    barrier = threading.Barrier(clients + 1)
    samples: list[list[float]] = [[] for _ in range(clients)]
    allowed = [0] * clients

    def worker(c: int) -> None:
        barrier.wait()
        for i in range(per_client):
            start = time.perf_counter()
            allowed[c] += check(c, i)
            samples[c].append((time.perf_counter() - start) * 1000)

    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(worker, c) for c in range(clients)]
        barrier.wait()
        start = time.perf_counter()
        for future in futures:
            future.result()
        elapsed = time.perf_counter() - start
    flat = [s for per in samples for s in per]
    return Samples(clients, flat, elapsed, sum(allowed))


def timed(check: Callable[[int, int], bool], clients: int, per_client: int) -> Timing:
    """Latency and throughput of `sampled`."""
    return sampled(check, clients, per_client).timing()


def ours_checker(b: Backend, calls_per_session: int = 150) -> Callable[[int, int], bool]:
    """Allowed reads, a new session every `calls_per_session` calls (under the read limit
    of 200)."""
    checks = b.container.checks
    run = uuid.uuid4().hex[:8]
    made: Counter[int] = Counter()  # per client, across runs of the same checker

    def check(client: int, i: int) -> bool:
        session = f"lat-{run}-{client}-{made[client] // calls_per_session}"
        made[client] += 1
        return checks.check(TENANT, read_request(session, i)).allowed

    return check


def ours_write_checker(b: Backend, call_ids: bool = True) -> Callable[[int, int], bool]:
    """Allowed writes, counted at the session, the principal and the tenant: a new session
    every WRITE_LIMIT calls, a new principal (an agent's identity, which outlives its
    sessions) every PRINCIPAL_WRITES, under its budget of 100 a day; each with a call id
    unless `call_ids` is false (a call id is admitted after the answer: one more request)."""
    checks = b.container.checks
    run = uuid.uuid4().hex[:8]
    made: Counter[int] = Counter()

    def check(client: int, i: int) -> bool:
        session = f"w-{run}-{client}-{made[client] // WRITE_LIMIT}"
        principal = f"{PRINCIPAL}/{run}-{client}-{made[client] // PRINCIPAL_WRITES}"
        made[client] += 1
        request = write_request(session, i, call_ids, principal)
        return checks.check(TENANT, request).allowed

    return check


def naive_write_checker(b: Backend) -> Callable[[int, int], bool]:
    """The naive counter's allowed writes: one counter per session, as for reads."""
    naive = NaiveCounter(b.client, b.settings.counters_table)
    run = uuid.uuid4().hex[:8]
    made: Counter[int] = Counter()

    def check(client: int, i: int) -> bool:
        session = f"w-{run}-{client}-{made[client] // WRITE_LIMIT}"
        made[client] += 1
        return naive.check(session, "write", WRITE_LIMIT)

    return check


def ours_refused_checker(b: Backend, clients: int) -> Callable[[int, int], bool]:
    """Refused writes: each client's session has used its write budget (and had its first,
    audited refusal) before the clock starts."""
    checks = b.container.checks
    sessions = [session_id() for _ in range(clients)]
    for session in sessions:
        for i in range(WRITE_LIMIT + 1):
            checks.check(TENANT, write_request(session, i))

    def check(client: int, i: int) -> bool:
        return checks.check(TENANT, write_request(sessions[client], i)).allowed

    return check


def naive_checker(b: Backend) -> Callable[[int, int], bool]:
    return _reads(NaiveCounter(b.client, b.settings.counters_table))


def atomic_checker(b: Backend) -> Callable[[int, int], bool]:
    """Allowed reads counted by `AtomicCounter`, on our client (same configuration)."""
    return _reads(AtomicCounter(b.ours, b.settings.counters_table))


def _reads(counter: NaiveCounter | AtomicCounter) -> Callable[[int, int], bool]:
    """Allowed reads on `counter`, a new session every 150 calls (under the read limit)."""
    run = uuid.uuid4().hex[:8]

    def check(client: int, i: int) -> bool:
        return counter.check(f"lat-{run}-{client}-{i // 150}", "read", READ_LIMIT)

    return check


def naive_refused_checker(b: Backend, clients: int) -> Callable[[int, int], bool]:
    """Refused writes on sessions whose naive write counter is at the limit."""
    naive = NaiveCounter(b.client, b.settings.counters_table)
    sessions = [session_id() for _ in range(clients)]
    for session in sessions:
        for _ in range(WRITE_LIMIT):
            naive.check(session, "write", WRITE_LIMIT)

    def check(client: int, i: int) -> bool:
        return naive.check(sessions[client], "write", WRITE_LIMIT)

    return check


# -- over-admission under concurrency --------------------------------------------------


def burst(check: Callable[[], bool], clients: int, each: int = 1) -> int:
    """`clients` threads released together, `each` checks each; how many were allowed."""
    barrier = threading.Barrier(clients)

    def one(_: int) -> int:
        barrier.wait()
        return sum(check() for _ in range(each))

    with ThreadPoolExecutor(clients) as pool:
        return sum(pool.map(one, range(clients)))


def over_admission(b: Backend, clients: int, runs: int, each: int = 1) -> dict[str, list[int]]:
    """Allowed counts per run for ours and the naive counter against the write limit,
    `clients` threads each making `each` checks on one session."""
    checks = b.container.checks
    naive = NaiveCounter(b.client, b.settings.counters_table)
    ours: list[int] = []
    theirs: list[int] = []

    def ours_once(session: str) -> bool:
        return checks.check(TENANT, write_request(session)).allowed

    def naive_once(session: str) -> bool:
        return naive.check(session, "write", WRITE_LIMIT)

    for _ in range(runs):
        ours.append(burst(functools.partial(ours_once, session_id()), clients, each))
        theirs.append(burst(functools.partial(naive_once, session_id()), clients, each))
    return {"ours": ours, "naive": theirs}
