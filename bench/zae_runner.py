"""zae-limiter under the same workload as ours, run in its own venv (bench/.venv-zae):

    bench/.venv-zae/bin/python -m bench.zae_runner [--endpoint URL] > result.json

The same budget as our read category: a bucket of 200 per hour for each session (zae-limiter
is a token bucket; over a benchmark's seconds it refills nothing that matters). Prints one
JSON object: request counts per allowed and per blocked acquire, latency and throughput at 1
and 8 clients, or the error that stopped it on this backend.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from moto import mock_aws
from zae_limiter import (  # type: ignore[import-not-found]
    Limit,
    RateLimitExceeded,
    SyncRateLimiter,
    SyncRepository,
    schema,
)

from bench.sizing import item_size, write_units

READ_LIMIT = 200
WRITE_LIMIT = 15


@contextmanager
def _backend(endpoint: str | None) -> Iterator[None]:
    if endpoint is not None:
        yield
        return
    with mock_aws():
        yield


def _repository(endpoint: str | None) -> Any:
    """A repository on a plain table, without CloudFormation (which moto/dynalite lack).

    The namespace records are written with PutItem: `_register_namespace` uses
    TransactWriteItems, and the point here is the acquire path, not provisioning.
    """
    repo = SyncRepository(
        name=f"bench-{uuid.uuid4().hex[:6]}",
        region="us-east-1",
        endpoint_url=endpoint,
        _skip_deprecation_warning=True,
    )
    repo.create_table()
    client = repo._get_client()
    namespace_id = "bench"
    pk = schema.pk_system(schema.RESERVED_NAMESPACE)
    for sk in (schema.sk_namespace("default"), schema.sk_nsid(namespace_id)):
        item = {
            "PK": {"S": pk},
            "SK": {"S": sk},
            "namespace_id": {"S": namespace_id},
            "namespace_name": {"S": "default"},
            "status": {"S": "active"},
            "created_at": {"S": "2026-01-01T00:00:00Z"},
            "GSI4PK": {"S": schema.RESERVED_NAMESPACE},
            "GSI4SK": {"S": pk},
        }
        client.put_item(TableName=repo.table_name, Item=item)
    repo._namespace_cache["default"] = namespace_id
    repo._namespace_id = namespace_id
    repo._namespace_name = "default"
    repo._reinitialize_config_cache(namespace_id)
    repo._builder_initialized = True
    return repo


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def _timed(check: Callable[[int, int], bool], clients: int, per_client: int) -> dict[str, Any]:
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
    flat = sorted(s for per in samples for s in per)
    return {
        "clients": clients,
        "checks": len(flat),
        "p50_ms": round(flat[len(flat) // 2], 3),
        "p99_ms": round(_percentile(flat, 99), 3),
        "checks_per_second": round(len(flat) / elapsed, 1),
        "allowed": sum(allowed),
    }


def measure(endpoint: str | None, per_client: int) -> dict[str, Any]:
    """Cost and timings of zae-limiter's acquire on one backend."""
    repo = _repository(endpoint)
    limiter = SyncRateLimiter(repository=repo)
    client = repo._get_client()
    ops: Counter[str] = Counter()
    lock = threading.Lock()

    def seen(model: Any, **_: Any) -> None:
        with lock:
            ops[model.name] += 1

    client.meta.events.register("before-call.dynamodb", seen)
    reads = [Limit.per_hour("read", READ_LIMIT)]
    writes = [Limit.per_hour("write", WRITE_LIMIT)]

    def acquire(session: str, limits: list[Any], resource: str) -> bool:
        try:
            with limiter.acquire(
                entity_id=session, resource=resource, limits=limits, consume={resource: 1}
            ):
                return True
        except RateLimitExceeded:
            return False

    session = f"mcp-session-{uuid.uuid4()}"
    acquire(session, writes, "write")  # a bucket's first acquire creates it (a transaction)
    ops.clear()
    allowed = sum(acquire(session, writes, "write") for _ in range(WRITE_LIMIT - 1))
    allowed_ops = Counter(ops)
    ops.clear()
    blocked = sum(not acquire(session, writes, "write") for _ in range(10))
    blocked_ops = Counter(ops)
    items = client.scan(TableName=repo.table_name)["Items"]
    buckets = [i for i in items if session in i["PK"]["S"]]
    size = max((item_size(i) for i in buckets), default=0)

    run = uuid.uuid4().hex[:6]

    def check(c: int, i: int) -> bool:
        return acquire(f"lat-{run}-{c}-{i // 150}", reads, "read")

    def per(counter: Counter[str], n: int) -> float:
        return round(sum(counter.values()) / n, 3) if n else 0.0

    return {
        "ok": True,
        "cost": {
            "allowed_checks": allowed,
            "requests_per_allowed": per(allowed_ops, allowed),
            "allowed_requests_by_op": dict(allowed_ops),
            "wcu_per_allowed": write_units(*buckets) if buckets else None,
            "blocked_checks": blocked,
            "requests_per_blocked": per(blocked_ops, blocked),
            "blocked_requests_by_op": dict(blocked_ops),
            "max_item_bytes": size,
        },
        "timings": [_timed(check, 1, per_client * 2), _timed(check, 8, per_client)],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint")
    parser.add_argument("--checks", type=int, default=100, help="per client at 8 clients")
    args = parser.parse_args()
    for name, value in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        os.environ.setdefault(name, value)
    try:
        with _backend(args.endpoint):
            result = measure(args.endpoint, args.checks)
    except Exception as exc:  # reported in the table as the reason it could not run
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
