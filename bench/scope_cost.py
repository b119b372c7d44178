"""What a check costs at each scope configuration (issue 11): DynamoDB requests and write
units per allowed and refused check, counted by botocore on moto in-process, with write
units from DynamoDB's item-size rules on the items each request touched.

    .venv/bin/python -m bench.scope_cost
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from moto import mock_aws

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")  # before chalicelib builds its Logger

from bench.sizing import write_units
from bench.workloads import RequestLog
from chalicelib.check.requests import CheckRequest
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import Scope
from chalicelib.wiring import Container
from tests.support import client_for, fake_aws_env, fresh_settings, provisioned

TENANT = "bench"
# The default policy's shape, with small numbers so every refusal is reached quickly.
CONFIGURATIONS: dict[str, dict[str, Any]] = {
    "session only (reads)": {"limit": 5},
    "session + principal": {"limit": 5, "principal": {"limit": 8, "window": "24h"}},
    "session + principal + tenant (writes)": {
        "limit": 5,
        "principal": {"limit": 8, "window": "24h"},
        "tenant": {"limit": 1000, "window": "1h"},
    },
}


@dataclass
class ScopeCost:
    """Requests and write units per check of one kind."""

    checks: int = 0
    requests: Counter[str] = field(default_factory=Counter)
    units: int = 0

    def add(self, ops: Counter[str], units: int) -> None:
        self.checks += 1
        self.requests += ops
        self.units += units

    def as_json(self) -> dict[str, Any]:
        n = max(1, self.checks)
        return {
            "checks": self.checks,
            "requests": round(sum(self.requests.values()) / n, 2),
            "by_op": {op: round(c / n, 2) for op, c in sorted(self.requests.items())},
            "write_units": round(self.units / n, 2),
        }


def _policy_file(directory: Path, write: dict[str, Any]) -> str:
    policy = {
        "version": 1,
        "categories": {"read": {"limit": 200}, "write": write},
        "suspend_after_refusals": 10_000,  # escalation is not measured here
        "rules": [{"pattern": "delete_*", "category": "write"}],
    }
    path = directory / "policy.json"
    path.write_text(json.dumps(policy))
    return str(path)


@contextmanager
def _container(write: dict[str, Any]) -> Iterator[tuple[Container, Any]]:
    fake_aws_env()
    with mock_aws(), tempfile.TemporaryDirectory() as tmp:
        client = client_for(None)
        settings = provisioned(client, fresh_settings(f"s{uuid.uuid4().hex[:8]}"))
        settings = replace(settings, policy=_policy_file(Path(tmp), write))
        container = Container(settings=settings)
        container.__dict__["dynamodb"] = client
        yield container, client


def _units(client: Any, table: str, ops: Counter[str]) -> int:
    """Write units of the writes one check made: each counter-table item it wrote (the
    session's, the principal's, the tenant's) is read back and sized, before and after."""
    writes = ops["UpdateItem"] + ops["PutItem"]
    if not writes:
        return 0
    items = client.scan(TableName=table)["Items"]
    largest = max((write_units(item) for item in items), default=1)
    return writes * largest


def measure(write: dict[str, Any]) -> dict[str, Any]:
    """A runaway agent: each session of one principal is used up and then refused four
    more times before the agent opens a fresh one, until the principal budget (where one
    exists) refuses too. A first refusal also writes its audit events (and the email's)."""
    costs: dict[str, ScopeCost] = {}
    with _container(write) as (container, client):
        checks, table = container.checks, container.settings.counters_table
        warm = CheckRequest("warm", "get_x", principal="agent")
        checks.attempt_for(TENANT, warm)  # grants: one Query per tenant, then cached
        checks.check(TENANT, warm)  # the principal gate: one GetItem, then cached
        log = RequestLog(client)
        session, refusals = 0, 0
        for _ in range(60):
            request = CheckRequest(f"s-{session}", "delete_x", principal="agent")
            log.take()
            decision = checks.check(TENANT, request)
            ops = log.take()
            if not isinstance(decision, Refused):
                kind = "allowed"
            else:
                by = "the session" if decision.scope is Scope.SESSION else "the principal"
                first = "first" if decision.first_exhaustion else "again"
                kind = f"refused by {by} ({first})"
                refusals += decision.scope is Scope.SESSION
                if refusals == 5:  # the agent gives up on this session, opens another
                    session, refusals = session + 1, 0
            costs.setdefault(kind, ScopeCost()).add(ops, _units(client, table, ops))
    return {kind: cost.as_json() for kind, cost in sorted(costs.items())}


def measure_all() -> dict[str, Any]:
    """Every configuration's figures."""
    return {name: measure(write) for name, write in CONFIGURATIONS.items()}


def table(results: dict[str, Any]) -> str:
    """The per-scope cost table."""
    lines = [
        "Cost per check by scope configuration (moto; botocore-counted requests; write "
        "units ~ by DynamoDB's size rules on the largest counters item)",
        f"{'configuration':40} {'check':34} {'requests':>8} {'write units':>11}  by operation",
    ]
    for name, kinds in results.items():
        for kind, figures in kinds.items():
            ops = ", ".join(f"{op} {n}" for op, n in figures["by_op"].items())
            lines.append(
                f"{name:40} {kind:34} {figures['requests']:>8} {figures['write_units']:>11}  {ops}"
            )
    return "\n".join(lines)


def main() -> int:
    print(table(measure_all()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
