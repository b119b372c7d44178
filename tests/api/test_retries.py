"""A retry is exact at every scope: a call answered 503 because a wider budget failed
is counted nowhere, and its retry with the same call id is counted everywhere, never
answered as a "duplicate" of a half-counted original."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from chalicelib.quota.core import BudgetKey, Scope, Spend
from chalicelib.storage.ports import BudgetCounters, NotTaken, StoreUnavailable, Taken
from tests.api.conftest import Api, body
from tests.api.test_scopes import scoped

__all__ = ["scoped"]


@dataclass
class Throttling:
    """The real budgets, with takes of one scope throttled while `failing` is set: the
    request is refused by the store before it is applied, as DynamoDB throttles."""

    real: BudgetCounters
    scope: Scope
    failing: bool = True
    failed: list[BudgetKey] = field(default_factory=list)

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        if self.failing and key.scope is self.scope:
            self.failed.append(key)
            raise StoreUnavailable("counting a call", retry_after_seconds=1, throttled=True)
        return self.real.take(key, spend)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture(params=[Scope.PRINCIPAL, Scope.TENANT])
def throttled(request: pytest.FixtureRequest, scoped: Api) -> Iterator[tuple[Api, Throttling]]:
    container = scoped.container
    faulty = Throttling(container.budgets, request.param)
    container.__dict__["budgets"] = faulty  # before the check service is built on it
    container.__dict__.pop("checks", None)
    container.__dict__.pop("gate", None)
    yield scoped, faulty


def used(api: Api, path: str) -> int:
    return int(body(api.get(path))["categories"]["write"]["used"])


def test_every_call_told_allowed_is_counted_at_every_scope(
    throttled: tuple[Api, Throttling],
) -> None:
    api, faulty = throttled
    allowed = 0
    for i in range(3):
        call = {"session_id": "s", "tool": "delete_tag", "principal": "bot", "call_id": f"c{i}"}
        faulty.failing = True
        failed = api.check(**call)
        assert failed.status_code == 503 and failed.headers["Retry-After"] == "1"
        assert used(api, "/v1/sessions/s") == allowed  # nothing stayed counted
        faulty.failing = False
        retry = api.check(**call)
        assert retry.status_code == 200, retry.body
        assert not body(retry).get("duplicate")  # counted now, at every scope
        allowed += 1
        again = api.check(**call)  # the client's own retry of that answer
        assert again.status_code == 200 and body(again)["duplicate"] is True
    assert faulty.failed
    assert used(api, "/v1/sessions/s") == allowed == 3
    assert used(api, "/v1/principals/bot") == allowed
    assert used(api, "/v1/tenant") == allowed
