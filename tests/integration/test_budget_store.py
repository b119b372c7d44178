"""The wider budgets' port (a principal's, the tenant's), one behaviour suite over
memory, moto and dynalite, through the port only."""

from __future__ import annotations

import random

import pytest

from bench.sizing import item_size
from chalicelib.quota.core import BudgetKey, Spend
from chalicelib.storage.dynamodb.budgets import BudgetStore
from chalicelib.storage.ports import NotTaken, RecordChanged, RecordNotFound, Taken
from tests.support import T0, Backend, Stores

DAY = 86_400_000
WEEK = 7 * DAY
BOT = BudgetKey.principal("demo", "bot")
W, R = "write", "read"  # categories: each keeps its own streak
TENANT = BudgetKey.whole_tenant("demo")


def spend(limit: int = 3, day: int = 0) -> Spend:
    start = (T0 // DAY + day) * DAY
    return Spend("write", limit, start, start + DAY, start + 1000)


def test_takes_up_to_the_limit_then_refuses_and_keeps_scopes_apart(stores: Stores) -> None:
    budgets = stores.budgets
    results = [budgets.take(BOT, spend()) for _ in range(4)]
    assert [isinstance(r, Taken) for r in results] == [True, True, True, False]
    refused = results[-1]
    assert isinstance(refused, NotTaken) and refused.snapshot is not None
    assert refused.snapshot.used("write", spend().window_start_ms) == 3
    assert isinstance(budgets.take(BudgetKey.principal("demo", "other"), spend()), Taken)
    assert isinstance(budgets.take(BudgetKey.whole_tenant("demo"), spend()), Taken)
    assert isinstance(budgets.take(BudgetKey.principal("acme", "bot"), spend()), Taken)


def test_a_new_window_starts_from_zero_and_old_windows_are_dropped(stores: Stores) -> None:
    budgets = stores.budgets
    for _ in range(3):
        budgets.take(BOT, spend())
    taken = budgets.take(BOT, spend(day=1))
    assert isinstance(taken, Taken)
    assert taken.snapshot.used("write", spend(day=1).window_start_ms) == 1
    budgets.take(BOT, spend(day=3))
    snapshot = budgets.get(BOT)
    assert snapshot is not None and spend().window_start_ms not in snapshot.counts


def test_give_back_undoes_one_take_and_never_goes_below_zero(stores: Stores) -> None:
    budgets = stores.budgets
    budgets.take(BOT, spend())
    budgets.give_back(BOT, spend())
    budgets.give_back(BOT, spend())
    snapshot = budgets.get(BOT)
    assert snapshot is not None and snapshot.used("write", spend().window_start_ms) == 0


def test_the_first_refusal_per_window_and_limit(stores: Stores) -> None:
    budgets = stores.budgets
    assert budgets.note_refusal(TENANT, spend()) is True
    assert budgets.note_refusal(TENANT, spend()) is False
    assert budgets.note_refusal(TENANT, spend(limit=5)) is True  # a new limit
    assert budgets.note_refusal(TENANT, spend(limit=5, day=1)) is True  # a new window


def test_a_principal_streak_runs_until_an_allowed_call_or_an_admin_action(
    stores: Stores,
) -> None:
    budgets = stores.budgets
    assert budgets.note_streak(BOT, W, T0 + 1, 0, spend()) == (1, True)
    assert budgets.note_streak(BOT, W, T0 + 2, 0, spend()) == (2, False)
    assert budgets.note_streak(BOT, W, T0 + 3, 0) == (3, False)  # refused by another scope
    # The refused session made an allowed write after the last refusal: a new streak.
    assert budgets.note_streak(BOT, W, T0 + 5, T0 + 4) == (1, False)
    assert budgets.note_streak(BOT, W, T0 + 6, T0 + 4)[0] == 2
    budgets.take(BOT, spend(limit=5, day=1))  # taken, but not yet allowed everywhere
    assert budgets.note_streak(BOT, W, T0 + 7, 0)[0] == 3
    budgets.end_streak(BOT, W, T0 + 6)  # allowed before that refusal: it stands
    assert budgets.note_streak(BOT, W, T0 + 8, 0)[0] == 4
    budgets.end_streak(BOT, W, T0 + 8)  # a call allowed at every scope
    assert budgets.note_streak(BOT, W, T0 + 9, 0)[0] == 1
    budgets.suspend(BOT, "loop")
    budgets.resume(BOT)
    assert budgets.note_streak(BOT, W, T0 + 10, 0)[0] == 1
    budgets.raise_limit(BOT, "write", 9)
    assert budgets.note_streak(BOT, W, T0 + 11, 0)[0] == 1


def test_each_category_keeps_its_own_streak(stores: Stores) -> None:
    """Escalation misses the incident's own pattern: a principal's streak is kept per
    category, so that only an allowed call in the refused category (or an administrator)
    ends it."""
    budgets = stores.budgets
    assert budgets.note_streak(BOT, W, T0 + 1, 0, spend())[0] == 1
    assert budgets.note_streak(BOT, R, T0 + 2, 0)[0] == 1  # a read refused: its own streak
    assert budgets.note_streak(BOT, W, T0 + 3, 0)[0] == 2
    # An allowed read since the last refused write, in the session: the writes go on.
    assert budgets.note_streak(BOT, W, T0 + 5, 0)[0] == 3
    # ... an allowed write since the last refused write starts that streak again.
    assert budgets.note_streak(BOT, W, T0 + 7, T0 + 6)[0] == 1
    budgets.end_streak(BOT, R, T0 + 8)  # a read allowed everywhere: the reads' streak ends
    assert budgets.note_streak(BOT, W, T0 + 9, 0)[0] == 2
    assert budgets.note_streak(BOT, R, T0 + 9, 0)[0] == 1
    assert budgets.note_streak(BOT, R, T0 + 10, 0, refusals=3)[0] == 4  # held by a client
    seen = budgets.get(BOT)
    assert seen is not None and seen.streaks == {"write": 2, "read": 4}
    assert seen.refusals_in_a_row == 4
    raised = budgets.raise_limit(BOT, "write", 9)  # a raise ends its category's streak only
    assert raised.streaks == {"read": 4}
    assert budgets.note_streak(BOT, W, T0 + 11, 0)[0] == 1
    resumed = budgets.resume(BOT)  # a resume ends every streak
    assert resumed.streaks == {} and resumed.refusals_in_a_row == 0
    assert budgets.note_streak(BOT, R, T0 + 12, 0)[0] == 1
    assert budgets.note_streak(BOT, W, T0 + 12, 0)[0] == 1
    reset = budgets.reset(BOT)  # and so does a reset
    assert reset.streaks == {}
    assert budgets.note_streak(BOT, R, T0 + 13, 0)[0] == 1


def test_a_raise_lifts_the_limit_and_never_lowers_it(stores: Stores) -> None:
    budgets = stores.budgets
    for _ in range(3):
        budgets.take(BOT, spend())
    raised = budgets.raise_limit(BOT, "write", 5)
    assert raised.limit_for("write", 3) == 5
    assert isinstance(budgets.take(BOT, spend()), Taken)
    with pytest.raises(RecordChanged):
        budgets.raise_limit(BOT, "write", 4)


def test_suspension_refuses_every_take_until_resumed(stores: Stores) -> None:
    budgets = stores.budgets
    snapshot, newly = budgets.suspend(BOT, "looks wrong")
    assert newly and snapshot.suspended and snapshot.suspended_reason == "looks wrong"
    assert budgets.suspend(BOT, "again")[1] is False
    refused = budgets.take(BOT, spend())
    assert isinstance(refused, NotTaken) and refused.snapshot is not None
    assert refused.snapshot.suspended
    resumed = budgets.resume(BOT)
    assert not resumed.suspended and resumed.refusals_in_a_row == 0
    assert isinstance(budgets.take(BOT, spend()), Taken)


def test_reset_zeroes_every_window_and_keeps_raises_and_suspension(stores: Stores) -> None:
    budgets = stores.budgets
    budgets.take(BOT, spend())
    budgets.raise_limit(BOT, "write", 9)
    budgets.suspend(BOT, "hold")
    after = budgets.reset(BOT)
    assert after.used("write", spend().window_start_ms) == 0
    assert after.suspended and after.limit_for("write", 3) == 9


def test_reset_of_a_budget_with_nothing_counted_nor_streaking(stores: Stores) -> None:
    """Found by the model test on dynalite: a reset with nothing to clear (a budget that
    only ever refused, its streaks resumed) wrote an empty update."""
    budgets = stores.budgets
    budgets.note_streak(BOT, W, T0 + 1, 0)
    budgets.resume(BOT)
    after = budgets.reset(BOT)
    assert after.streaks == {} and not after.suspended


def test_resume_and_reset_of_an_unseen_budget_are_not_found(stores: Stores) -> None:
    unseen = BudgetKey.principal("demo", "nobody")
    assert stores.budgets.get(unseen) is None
    with pytest.raises(RecordNotFound):
        stores.budgets.resume(unseen)
    with pytest.raises(RecordNotFound):
        stores.budgets.reset(unseen)


def test_a_budget_item_stays_small_after_a_year_of_gappy_traffic(backend: Backend) -> None:
    """A principal's item counts one window per category, whatever the gaps: a year of
    bursts on a 15-minute window, 5 minutes to a week apart (some 260 bursts, 225
    windows), each through a new container (a cold adapter) or the same one, leaves it
    under 2 KB, with exactly the current window's count."""
    rng = random.Random(7)
    window = 15 * 60_000
    table = backend.settings.counters_table
    adapter = BudgetStore(backend.client, table)
    now = T0
    while now - T0 <= 366 * 86_400_000:
        now += rng.choice([window // 3, 2 * window, 7 * window, 26 * window, 97 * window, WEEK])
        if rng.random() < 0.5:
            adapter = BudgetStore(backend.client, table)  # another Lambda container
        for category in ("write", "delete"):
            start = now - now % window
            for _ in range(rng.randint(1, 3)):
                adapter.take(BOT, Spend(category, 50, start, start + window, now))
    assert now - T0 > 365 * 86_400_000
    items = backend.client.scan(TableName=table)["Items"]
    assert len(items) == 1 and item_size(items[0]) < 2048
    snapshot = adapter.get(BOT)
    assert snapshot is not None and set(snapshot.counts) == {now - now % window}


def test_a_budget_keeps_the_writers_of_the_last_minutes_only(backend: Backend) -> None:
    """A budget item keeps each writer's last write number (`quota.writes`), so that the
    store's resend of a write applies once; a tenant's item is written by every
    container, so writers not seen for 10 minutes are dropped by later writes: 30
    containers at minute 1, then one at minute 12, leave that one alone on the item."""
    table = backend.settings.counters_table
    minute = 60_000
    start = T0 - T0 % DAY

    def take(adapter: BudgetStore, at_ms: int) -> None:
        assert isinstance(
            adapter.take(TENANT, Spend("write", 10_000, start, start + DAY, at_ms)), Taken
        )

    for _ in range(30):
        take(BudgetStore(backend.client, table), start + minute)
    late = BudgetStore(backend.client, table)
    for i in range(9):
        take(late, start + 12 * minute + i)
    seen = late.get(TENANT)
    assert seen is not None and seen.used("write", start) == 39
    assert len(seen.writes) == 1
