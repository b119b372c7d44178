"""A budget's item (a principal's, the tenant's, a tenant shard's) in the counters
table: its key, its attributes, and how it decodes; `budgets` writes it.

Item layout (every attribute aliased in expressions):
    pk             "<tenant> <scope> <subject>": a space, which no session key holds
    c_<cat>        calls counted in a category in its current window
    w_<cat>        when that window started, epoch ms: the first take in a later window
                   starts the count again, so an item holds one count per category,
                   whatever the gaps between windows (items written before kept
                   n_<cat>_<ws> names: read as they are, removed by a reset or the TTL)
    r_<cat>        a raised limit (admin)
    z_<cat>        "<ws>|<limit>": the window and limit of the last first-refusal (one event)
    rf_<cat>       a principal's refusals in a row in a category (escalation); a call in
                   the category allowed at every scope, a raise of it, and a resume or
                   reset remove it (items written before kept one `rf` for every
                   category: ignored, removed by a resume or reset)
    rl_<cat>       when the principal was last refused in a category, epoch ms: a refusal
                   in a session with an allowed call in that category since then starts
                   the streak there again (before: one `rl`, as `rf`)
    wq_<writer>    a writer's last write number (`quota.writes`): a take, give-back or
                   streak sent again by botocore finds its own number and is not applied
                   twice; a writer not seen for 10 minutes is dropped by a later write
    suspended      the reason, while suspended (no TTL then)
    expires_at     TTL, epoch s: a day past the current window; clean-up only
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.quota.changes import Field, Slot
from chalicelib.quota.core import BudgetKey, BudgetSnapshot
from chalicelib.storage.dynamodb.changes import Layout
from chalicelib.storage.dynamodb.layout import (
    BUDGET_COUNT_PREFIX,
    BUDGET_WINDOW_PREFIX,
    LAST_REFUSAL_PREFIX,
    STREAK_PREFIX,
    WRITER_PREFIX,
)
from chalicelib.storage.dynamodb.updates import s

PK = "pk"
COUNT_PREFIX = BUDGET_COUNT_PREFIX
WINDOW_PREFIX = BUDGET_WINDOW_PREFIX
OLD_COUNT_PREFIX = "n_"  # the per-window names items were written with before
RAISED_PREFIX = "r_"
NOTIFIED_PREFIX = "z_"
OLD_STREAK = ("rf", "rl")  # the one streak items were written with before
SUSPENDED = "suspended"
EXPIRES = "expires_at"

NAMES = {"#pk": PK}
BUDGET = Layout(
    prefixes={
        Slot.COUNTS: ("#n", COUNT_PREFIX),
        Slot.WINDOWS: ("#w", WINDOW_PREFIX),
        Slot.RAISED: ("#r", RAISED_PREFIX),
        Slot.MARKS: ("#z", NOTIFIED_PREFIX),
        Slot.STREAKS: ("#rf", STREAK_PREFIX),
        Slot.LAST_REFUSALS: ("#rl", LAST_REFUSAL_PREFIX),
        Slot.WRITES: ("#wq", WRITER_PREFIX),
    },
    fields={
        Field.SUSPENDED: ("#sus", SUSPENDED),
        Field.EXPIRES: ("#exp", EXPIRES),
    },
)


def item_key(key: BudgetKey) -> dict[str, Any]:
    return {PK: s(f"{key.tenant} {key.scope.value} {key.subject}")}


def _mark(value: Mapping[str, Any]) -> tuple[int, int] | None:
    """The window and limit a `z_<cat>` attribute records."""
    window, _, limit = str(value.get("S", "")).partition("|")
    return (int(window), int(limit)) if window.isdigit() and limit.isdigit() else None


def snapshot_from_item(item: Mapping[str, Any]) -> BudgetSnapshot:
    """Decode a budget item."""
    counts: dict[int, dict[str, int]] = {}
    raised: dict[str, int] = {}
    streaks: dict[str, int] = {}
    last_refusals: dict[str, int] = {}
    writes: dict[str, int] = {}
    marks: dict[str, tuple[int, int]] = {}
    windows: dict[str, int] = {}
    for name, value in item.items():
        if name.startswith(COUNT_PREFIX) and "N" in value:
            category = name[len(COUNT_PREFIX) :]
            start = item.get(WINDOW_PREFIX + category, {}).get("N")
            if start is not None:
                counts.setdefault(int(start), {})[category] = int(value["N"])
        elif name.startswith(OLD_COUNT_PREFIX) and "N" in value:
            category, _, old_start = name[len(OLD_COUNT_PREFIX) :].rpartition("_")
            counts.setdefault(int(old_start), {}).setdefault(category, int(value["N"]))
        elif name.startswith(RAISED_PREFIX) and "N" in value:
            raised[name[len(RAISED_PREFIX) :]] = int(value["N"])
        elif name.startswith(STREAK_PREFIX) and "N" in value:
            streaks[name[len(STREAK_PREFIX) :]] = int(value["N"])
        elif name.startswith(LAST_REFUSAL_PREFIX) and "N" in value:
            last_refusals[name[len(LAST_REFUSAL_PREFIX) :]] = int(value["N"])
        elif name.startswith(WRITER_PREFIX) and "N" in value:
            writes[name[len(WRITER_PREFIX) :]] = int(value["N"])
        elif name.startswith(WINDOW_PREFIX) and "N" in value:
            windows[name[len(WINDOW_PREFIX) :]] = int(value["N"])
        elif name.startswith(NOTIFIED_PREFIX) and (mark := _mark(value)) is not None:
            marks[name[len(NOTIFIED_PREFIX) :]] = mark
    suspended = item.get(SUSPENDED)
    return BudgetSnapshot(
        counts=counts,
        raised=raised,
        suspended_reason=suspended.get("S") if suspended else None,
        streaks=streaks,
        last_refusals=last_refusals,
        writes=writes,
        marks=marks,
        windows=windows,
    )


def held(item: Mapping[str, Any], *prefixes: str) -> tuple[str, ...]:
    """The categories an item holds attributes of under these prefixes."""
    return tuple(sorted({name.split("_", 1)[1] for name in item if name.startswith(prefixes)}))
