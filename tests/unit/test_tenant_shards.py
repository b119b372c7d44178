"""Issue 33, item 4: the tenant's ceiling split over shards, on the in-memory store with
a fixed clock. Parts add up to the limit, a second shard is probed before a refusal, a
spent tenant's refusals write no tenant item, and what was taken goes back to its shard."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from chalicelib.check.requests import CheckRequest, LeaseReturn
from chalicelib.check.service import CheckService
from chalicelib.check.shards import HINT_MS, ShardHints, shard_key, summed, take_shard
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import BudgetKey, BudgetSnapshot, Scope, Spend
from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.leases import Lease, LeaseId
from chalicelib.quota.policy import default_shards, parse_policy, shard_part
from chalicelib.quota.writes import WriteId
from chalicelib.storage.memory.records import MemoryBudgets, MemoryCounters
from chalicelib.storage.ports import NotTaken, Taken
from tests.support import T0, FixedClock

TENANT = BudgetKey.whole_tenant("demo")
WINDOW_MS = 3_600_000


def policy(tenant: dict[str, Any]) -> Any:
    return parse_policy(
        {
            "version": 1,
            "categories": {
                "read": {"limit": 50, "tenant": {"limit": 60, "window": "1h"}},
                "write": {"limit": 12, "tenant": tenant},
            },
            "suspend_after_refusals": 1000,
        }
    )


class CountingBudgets(MemoryBudgets):
    """The in-memory store, counting the writes each item takes (reads are free)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: Counter[BudgetKey] = Counter()

    def take(self, key: BudgetKey, spend: Spend) -> Taken | NotTaken:
        self.writes[key] += 1
        return super().take(key, spend)

    def give_back(self, key: BudgetKey, spend: Spend, again: WriteId | None = None) -> None:
        self.writes[key] += 1
        super().give_back(key, spend, again)

    def note_refusal(self, key: BudgetKey, spend: Spend) -> bool:
        self.writes[key] += 1
        return super().note_refusal(key, spend)

    def tenant_writes(self) -> int:
        return sum(n for k, n in self.writes.items() if k.scope is Scope.TENANT)


def spend(units: int = 1, now_ms: int = T0, limit: int = 12) -> Spend:
    start = now_ms - now_ms % WINDOW_MS
    return Spend("write", limit, start, start + WINDOW_MS, now_ms, units)


# -- the parts and the policy --------------------------------------------------------


@pytest.mark.parametrize(("limit", "shards"), [(60, 10), (61, 7), (1000, 16), (7, 3), (1, 1)])
def test_the_parts_add_up_to_the_limit_and_differ_by_at_most_one(limit: int, shards: int) -> None:
    parts = [shard_part(limit, shards, i) for i in range(shards)]
    assert sum(parts) == limit and max(parts) - min(parts) <= 1
    assert parts == sorted(parts, reverse=True)  # the remainder on the first shards


def test_the_default_is_one_shard_per_6_calls_from_1_to_16() -> None:
    assert [default_shards(n) for n in (1, 11, 12, 60, 96, 1000, 10**9)] == [
        1,
        1,
        2,
        10,
        16,
        16,
        16,
    ]
    assert policy({"limit": 60, "window": "1h"}).categories["write"].tenant.shards == 10
    assert policy({"limit": 60, "window": "1h", "shards": 3}).categories["write"].tenant.shards == 3


@pytest.mark.parametrize("shards", [0, 61, 65, True, "4", 2.0])
def test_bad_shards_are_refused_at_start_up(shards: Any) -> None:
    with pytest.raises(ConfigurationError, match="shards"):
        policy({"limit": 60, "window": "1h", "shards": shards})


def test_only_the_tenant_scope_is_sharded() -> None:
    with pytest.raises(ConfigurationError, match="exactly limit and window"):
        parse_policy(
            {
                "version": 1,
                "categories": {
                    "read": {"limit": 5},
                    "write": {"limit": 3, "principal": {"limit": 9, "window": "1h", "shards": 2}},
                },
            }
        )


# -- one take ------------------------------------------------------------------------


def test_a_refused_shard_is_followed_by_a_second_before_a_refusal() -> None:
    """Defect class: under-admission (a refusal while the tenant still had room)."""
    budgets = CountingBudgets()
    for _ in range(4):  # shard 0 (4 of 12 over 3 shards) is spent
        assert isinstance(budgets.take(shard_key(TENANT, 0), spend(limit=4)), Taken)
    budgets.writes.clear()
    shard, result = take_shard(budgets, ShardHints(pick=lambda n: 0), TENANT, spend(), 3)
    assert isinstance(result, Taken) and shard == 1
    assert budgets.writes == Counter({shard_key(TENANT, 0): 1, shard_key(TENANT, 1): 1})


def test_no_shard_passes_its_part_and_the_sum_is_the_limit() -> None:
    """Defect class: over-admission (a shard counting past its part of the limit)."""
    budgets, hints = CountingBudgets(), ShardHints()
    taken = [take_shard(budgets, hints, TENANT, spend(), 5)[1] for _ in range(40)]
    assert sum(isinstance(t, Taken) for t in taken) <= 12
    counts = [budgets.get(shard_key(TENANT, i)) for i in range(5)]
    used = [c.used("write", spend().window_start_ms) if c else 0 for c in counts]
    assert used == [shard_part(12, 5, i) for i in range(5)]  # each shard full, none over


def test_a_take_of_several_units_goes_to_a_shard_with_room_for_all_of_them() -> None:
    budgets, hints = CountingBudgets(), ShardHints(pick=lambda n: 0)
    assert isinstance(budgets.take(shard_key(TENANT, 0), spend(3, limit=4)), Taken)
    shard, result = take_shard(budgets, hints, TENANT, spend(3), 3)
    assert isinstance(result, Taken) and shard == 1
    assert take_shard(budgets, hints, TENANT, spend(5), 3)[1].__class__ is NotTaken


def test_a_spent_tenant_is_refused_without_a_write_until_the_hint_lapses() -> None:
    """Defect class: a hot item (every refusal at a spent tenant wrote the tenant item)."""
    budgets, hints = CountingBudgets(), ShardHints()
    while isinstance(take_shard(budgets, hints, TENANT, spend(), 3)[1], Taken):
        pass
    budgets.writes.clear()
    for _ in range(100):
        shard, result = take_shard(budgets, hints, TENANT, spend(), 3)
        assert isinstance(result, NotTaken) and result.snapshot is not None
        assert result.snapshot.used("write", spend().window_start_ms) == shard_part(12, 3, shard)
    assert budgets.writes == Counter()
    # A few seconds on, what was given back meanwhile is looked for again: two shards
    # are probed a take, so the third is found by the second take at the latest.
    budgets.give_back(shard_key(TENANT, 2), spend(limit=4))
    later = spend(now_ms=T0 + HINT_MS)
    takes = [take_shard(budgets, hints, TENANT, later, 3) for _ in range(3)]
    assert [isinstance(r, Taken) for _, r in takes].count(True) == 1
    assert [s for s, r in takes if isinstance(r, Taken)] == [2]


# -- the check -----------------------------------------------------------------------


def test_a_spent_tenant_marks_its_exhaustion_once_and_then_writes_nothing() -> None:
    """Defect class: a hot item, and one notification per exhaustion."""
    rules = policy({"limit": 12, "window": "1h", "shards": 3})
    budgets, clock = CountingBudgets(), FixedClock()
    service = CheckService(rules, MemoryCounters(rules.categories), clock, 3600, budgets=budgets)
    answers = [service.check("demo", CheckRequest(f"s{i % 3}", "delete_tag")) for i in range(36)]
    assert sum(a.allowed for a in answers) == 12
    refused = [a for a in answers if isinstance(a, Refused)]
    assert all(r.scope is Scope.TENANT and r.used == r.limit == 12 for r in refused)
    assert [r.first_exhaustion for r in refused].count(True) == 1
    before = budgets.tenant_writes()
    for i in range(50):
        assert not service.check("demo", CheckRequest(f"s{i % 3}", "delete_tag")).allowed
    assert budgets.tenant_writes() == before


def test_a_lease_names_its_shard_and_comes_back_to_it() -> None:
    budgets, clock = CountingBudgets(), FixedClock()
    rules = parse_policy(
        {
            "version": 1,
            "categories": {
                "read": {"limit": 50, "lease_max": 5, "tenant": {"limit": 60, "window": "1h"}},
                "write": {"limit": 12},
            },
        }
    )
    service = CheckService(rules, MemoryCounters(rules.categories), clock, 3600, budgets=budgets)
    allowed = service.check("demo", CheckRequest("s", "search", category="read", lease=5))
    assert allowed.allowed and allowed.lease is not None  # type: ignore[union-attr]
    lease = allowed.lease  # type: ignore[union-attr]
    parsed = LeaseId.parse(lease.lease_id)
    assert parsed is not None and parsed.shard == lease.shard
    item = shard_key(TENANT, lease.shard)
    start = clock() - clock() % WINDOW_MS
    assert budgets.get(item).used("read", start) == 5  # type: ignore[union-attr]
    assert service.return_lease("demo", LeaseReturn("s", parsed, 3)) == 3
    assert budgets.get(item).used("read", start) == 2  # type: ignore[union-attr]


def test_an_older_lease_id_without_a_shard_still_parses_as_shard_0() -> None:
    lease = Lease("read", "abc", 3, T0, T0, T0 + 30_000, 10, 30)
    assert lease.lease_id.count("~") == 0
    assert LeaseId.parse(lease.lease_id).shard == 0  # type: ignore[union-attr]
    assert LeaseId.parse(Lease("read", "abc", 3, T0, T0, T0, 10, 30, "p", 7).lease_id).shard == 7  # type: ignore[union-attr]


def test_the_tenant_view_sums_its_shards() -> None:
    start = 1000
    one = BudgetSnapshot(counts={start: {"write": 4, "read": 1}})
    two = BudgetSnapshot(counts={start: {"write": 3}}, raised={"write": 5})
    assert summed([one, None, two]) == BudgetSnapshot(
        counts={start: {"write": 7, "read": 1}}, raised={"write": 5}
    )
    assert summed([None, None]) is None
