"""The tenant's ceiling split over shards: N items, each counting up to its part of the
limit, so that no one item takes every write of a busy tenant (DynamoDB serves about
1,000 writes a second per partition).

A take goes to one shard chosen at random, and a second is probed before the call is
refused. Each shard's take is the same conditional write as an unsharded budget's, at its
part of the limit, and the parts add up to the limit: the tenant is never over-admitted.
It may under-admit near the limit (two shards spent while another still has room, or a
call of several units larger than any shard has left).

What this container last saw of each shard is a hint, kept a few seconds: a shard seen without
room for a take is not written to again in that time, so a refusal at a spent tenant
writes no tenant item; the first refusal's mark is written once per window and limit,
and this container then knows it is set.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import TypeAlias

from chalicelib.quota.core import BudgetKey, BudgetSnapshot, Scope, Spend
from chalicelib.quota.policy import shard_part
from chalicelib.storage.ports import BudgetCounters, NotTaken, StorageError, Taken

# How long a shard seen without room stays skipped: long enough that a spent tenant's
# refusals write nothing, short enough that calls given back (a lease returned, a
# refusal at another scope) are found again within a few seconds.
HINT_MS = 5_000
PROBES = 2  # shards tried before a refusal: the one chosen, and one more
MAX_HINTS = 10_000  # entries per container before the hints start over

# A shard of a window at a limit: which item, which category, which window, which part.
Seen: TypeAlias = tuple[BudgetKey, str, int, int]
TakeResult: TypeAlias = Taken | NotTaken | StorageError


def shard_key(key: BudgetKey, shard: int) -> BudgetKey:
    """The item of one shard of the tenant's budget, named by its subject: shard 0 is the
    item the tenant had before shards (subject ""), so its counts stay valid."""
    if key.scope is not Scope.TENANT:
        return key
    return BudgetKey(key.tenant, Scope.TENANT, str(shard or ""))


def shard_of(key: BudgetKey) -> int:
    """Which shard of its budget an item is (0 for an unsharded one)."""
    return int(key.subject) if key.scope is Scope.TENANT and key.subject else 0


def shard_spend(spend: Spend, shards: int, shard: int) -> Spend:
    """A take from one shard: the same units, against the shard's part of the limit."""
    return replace(spend, limit=shard_part(spend.limit, shards, shard))


class ShardHints:
    """What this container last saw of each shard (how full, when), the takes it has in
    flight on each, and which first-refusal marks it knows are set. Hints only: they make
    the check skip a write, never admit a call."""

    def __init__(self, pick: Callable[[int], int] | None = None) -> None:
        self._pick = pick or random.randrange
        self._lock = threading.Lock()
        self._used: dict[Seen, tuple[int, int, int]] = {}  # used, limit, seen at (ms)
        self._flying: dict[Seen, int] = {}  # units this container is taking there now
        self._marked: set[Seen] = set()

    def claim(self, key: BudgetKey, spend: Spend, shards: int, tried: set[int]) -> int | None:
        """A shard to try for a take, chosen at random among those not tried yet that
        have room for its units, as last seen less what this container is taking there
        now; its units then count as in flight (until `release`). None: no such shard."""
        with self._lock:
            fits = [
                shard
                for shard in range(shards)
                if shard not in tried
                and self._room(_seen(key, spend, shards, shard), spend.now_ms) >= spend.units
            ]
            if not fits:
                return None
            shard = fits[self._pick(len(fits))]
            seen = _seen(key, spend, shards, shard)
            self._flying[seen] = self._flying.get(seen, 0) + spend.units
            return shard

    def release(self, item: BudgetKey, part: Spend) -> None:
        """A take claimed on this shard has answered."""
        seen = (item, part.category, part.window_start_ms, part.limit)
        with self._lock:
            left = self._flying.get(seen, 0) - part.units
            if left > 0:
                self._flying[seen] = left
            else:
                self._flying.pop(seen, None)

    def _room(self, seen: Seen, now_ms: int) -> int:
        """A shard's room as last seen (its part if not seen lately), less the units in
        flight there from this container. Called under the lock."""
        room = seen[3]
        known = self._used.get(seen)
        if known is not None and 0 <= now_ms - known[2] < HINT_MS:
            room = known[1] - known[0]
        return room - self._flying.get(seen, 0)

    def pick(self, shards: int) -> int:
        """A shard chosen at random."""
        return self._pick(shards)

    def learn(self, item: BudgetKey, part: Spend, snapshot: BudgetSnapshot) -> None:
        """Remember a shard as a take left it or a refusal saw it: the most used seen
        lately (counts only grow between give-backs, and answers may arrive out of order)."""
        used = snapshot.used(part.category, part.window_start_ms)
        limit = 0 if snapshot.suspended else snapshot.limit_for(part.category, part.limit)
        seen = (item, part.category, part.window_start_ms, part.limit)
        with self._lock:
            if len(self._used) > MAX_HINTS:
                self._used.clear()
            known = self._used.get(seen)
            if known is not None and 0 <= part.now_ms - known[2] < HINT_MS:
                used = max(used, known[0])
            self._used[seen] = (used, limit, part.now_ms)

    def as_seen(self, item: BudgetKey, part: Spend) -> BudgetSnapshot:
        """A shard as this container last saw it: what a refusal without a write shows."""
        known = self._used.get((item, part.category, part.window_start_ms, part.limit))
        used = known[0] if known is not None else part.limit
        return BudgetSnapshot(counts={part.window_start_ms: {part.category: used}})

    def gave_back(self, item: BudgetKey, part: Spend) -> None:
        """Calls went back to a shard: it is no longer known to be without room."""
        with self._lock:
            self._used.pop((item, part.category, part.window_start_ms, part.limit), None)

    def claim_mark(self, key: BudgetKey, spend: Spend) -> bool:
        """Whether this refusal writes the first-refusal mark at its window and limit:
        only if no other here has marked it, or is marking it now (so refusals that meet
        a spent budget together write it once, not once each)."""
        mark = (key, spend.category, spend.window_start_ms, spend.limit)
        with self._lock:
            if mark in self._marked:
                return False
            if len(self._marked) > MAX_HINTS:
                self._marked.clear()
            self._marked.add(mark)
            return True

    def unclaim_mark(self, key: BudgetKey, spend: Spend) -> None:
        """A claimed mark whose write failed: the next refusal writes it."""
        with self._lock:
            self._marked.discard((key, spend.category, spend.window_start_ms, spend.limit))


def _seen(key: BudgetKey, spend: Spend, shards: int, shard: int) -> Seen:
    """Which hint a take from one shard reads and writes."""
    part = shard_part(spend.limit, shards, shard)
    return shard_key(key, shard), spend.category, spend.window_start_ms, part


def summed(snapshots: list[BudgetSnapshot | None]) -> BudgetSnapshot | None:
    """A sharded budget as its shards add up: counts and raises summed per window and
    category, suspended if any shard is (None if no shard was ever written)."""
    seen = [s for s in snapshots if s is not None]
    if not seen:
        return None
    counts: dict[int, dict[str, int]] = {}
    raised: dict[str, int] = {}
    for snapshot in seen:
        for start, by_category in snapshot.counts.items():
            window = counts.setdefault(start, {})
            for category, used in by_category.items():
                window[category] = window.get(category, 0) + used
        for category, limit in snapshot.raised.items():
            raised[category] = raised.get(category, 0) + limit
    reason = next((s.suspended_reason for s in seen if s.suspended), None)
    return BudgetSnapshot(counts=counts, raised=raised, suspended_reason=reason)


def take_shard(
    budgets: BudgetCounters,
    hints: ShardHints,
    key: BudgetKey,
    spend: Spend,
    shards: int,
) -> tuple[int, TakeResult]:
    """Take `spend.units` from one shard with room for them: the shard that answered and
    its answer (a failure returned, not raised). Refused only after `PROBES` shards
    refused, or when no shard is left that this container has not seen lately without
    room (then nothing is written, and the answer shows a shard as last seen)."""
    refused: tuple[int, NotTaken, int] | None = None  # the roomiest refusal seen
    tried: set[int] = set()
    for _ in range(PROBES):
        shard = hints.claim(key, spend, shards, tried)
        if shard is None:
            break
        tried.add(shard)
        item, part = shard_key(key, shard), shard_spend(spend, shards, shard)
        try:
            result = budgets.take(item, part)
            if result.snapshot is not None:
                hints.learn(item, part, result.snapshot)
        except StorageError as exc:
            return shard, exc
        finally:
            hints.release(item, part)
        seen = result.snapshot
        if isinstance(result, Taken) or (seen is not None and seen.suspended):
            return shard, result
        room = -1 if seen is None else _room(seen, part)
        if refused is None or refused[2] < room:
            refused = (shard, result, room)
    if refused is not None:
        return refused[0], refused[1]
    shard = hints.pick(shards)
    item, part = shard_key(key, shard), shard_spend(spend, shards, shard)
    return shard, NotTaken(hints.as_seen(item, part))


def _room(seen: BudgetSnapshot, spend: Spend) -> int:
    """What a shard had left for the category when it refused."""
    limit = seen.limit_for(spend.category, spend.limit)
    return limit - seen.used(spend.category, spend.window_start_ms)
