"""Issue 18, item 3, over HTTP: with a store that throttles the principal or the tenant
step, every call the client is told is allowed is counted at every scope.

The service runs as `make run` starts it, on dynalite behind a proxy that answers a
budget item's UpdateItem with DynamoDB's throttling error while the test arms it. The
check is answered 503 and counted nowhere; its retry with the same call id, once the
store is back, is counted anew at every scope; the retry of that answer is a duplicate.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from chalicelib.quota.core import BudgetKey, Scope
from tests.e2e.faulty_store import FaultyStore, faulty_store
from tests.e2e.http import ADMIN_TOKEN, Reply, call
from tests.e2e.runner import Runner, make_run

pytestmark = [pytest.mark.e2e, pytest.mark.dynalite]

TENANT = "demo"  # the development tokens' tenant
PRINCIPAL = "bot"
CALLS = 3
# Room for every call at every scope (as in tests/api/test_scopes.py): a refusal here
# would be a miscount, not the limit.
POLICY = {
    "version": 1,
    "categories": {
        "read": {"limit": 50},
        "write": {
            "limit": 3,
            "principal": {"limit": 5, "window": "24h"},
            "tenant": {"limit": 8, "window": "1h"},
        },
    },
    "rules": [{"pattern": "delete_*", "category": "write"}],
}
THROTTLED_BUDGETS = {
    Scope.PRINCIPAL: BudgetKey.principal(TENANT, PRINCIPAL),
    Scope.TENANT: BudgetKey.whole_tenant(TENANT),
}


@dataclass(frozen=True)
class Service:
    runner: Runner
    store: FaultyStore

    def check(self, session: str, call_id: str) -> Reply:
        body = {"session_id": session, "tool": "delete_tag", "principal": PRINCIPAL}
        return call(f"{self.runner.url}/v1/check", "POST", {**body, "call_id": call_id})

    def writes_used(self, path: str) -> int:
        reply = call(f"{self.runner.url}{path}", token=ADMIN_TOKEN)
        assert reply.status == 200, reply.body
        return int(reply.body["categories"]["write"]["used"])

    def used_at_every_scope(self, session: str) -> dict[Scope, int]:
        return {
            Scope.SESSION: self.writes_used(f"/v1/sessions/{session}"),
            Scope.PRINCIPAL: self.writes_used(f"/v1/principals/{PRINCIPAL}"),
            Scope.TENANT: self.writes_used("/v1/tenant"),
        }


@pytest.fixture
def service(dynalite_endpoint: str, tmp_path: Path) -> Iterator[Service]:
    """`make run` on fresh tables in dynalite, through the faulty store."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    prefix = f"f{uuid.uuid4().hex[:10]}"
    with faulty_store(dynalite_endpoint) as store:
        env = {
            "AWS_ENDPOINT_URL": store.endpoint,
            "QUOTA_POLICY": str(policy),
            **{
                f"QUOTA_{table.upper()}_TABLE": f"{prefix}-{table}"
                for table in ("counters", "tokens", "audit", "grants")
            },
        }
        with make_run(tmp_path, env) as runner:
            yield Service(runner, store)


@pytest.mark.parametrize("scope", [Scope.PRINCIPAL, Scope.TENANT], ids=str)
def test_every_call_told_allowed_is_counted_at_every_scope(service: Service, scope: Scope) -> None:
    budget, session = THROTTLED_BUDGETS[scope], "s"
    allowed = 0
    for i in range(CALLS):
        call_id = f"c{i}"
        with service.store.throttling(budget):
            failed = service.check(session, call_id)
            assert failed.status == 503, (failed.body, service.runner.output()[-3000:])
            assert failed.body["error"]["code"] == "store_unavailable", failed.body
            assert int(failed.headers["Retry-After"]) >= 1
            # Given back at every scope before the 503 was answered: nothing stays counted.
            assert service.used_at_every_scope(session) == dict.fromkeys(Scope, allowed)
        retry = service.check(session, call_id)
        assert retry.status == 200, retry.body
        assert not retry.body.get("duplicate"), retry.body  # counted now, at every scope
        allowed += 1
        again = service.check(session, call_id)  # the client's own retry of that answer
        assert again.status == 200 and again.body["duplicate"] is True, again.body
    # Each 503 was the store's throttle (botocore retried it inside the service).
    assert service.store.throttled.count(budget) >= CALLS
    assert set(service.store.throttled) == {budget}
    assert service.used_at_every_scope(session) == dict.fromkeys(Scope, allowed)
    assert allowed == CALLS
