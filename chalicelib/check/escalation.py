"""Suspension above the session: which principals are suspended (cached per container),
and escalation, which suspends a principal that ignored `suspend_after_refusals`
refusals in a row in one category (once: one email per suspension)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from chalicelib.check.steps import retried, surely_not_written
from chalicelib.clock import Clock, Expiring
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import Attempt, BudgetKey, RefusalReason
from chalicelib.storage.ports import BudgetCounters, StorageError

if TYPE_CHECKING:
    from collections.abc import Mapping

# How long refusals may wait in a container to count in their principal's streak: views
# and other containers see a streak at most this late while the loop goes on here.
STREAK_BATCH_MS = 10_000


class PrincipalGate:
    """Which principals are suspended, cached per container for `cache_seconds`, so that
    a check of a category without a principal budget (reads, by default) pays no request
    for it. A suspension reaches such checks in other containers within that delay; a
    category with a principal budget sees it at once, in its conditional update."""

    def __init__(self, budgets: BudgetCounters, clock: Clock, cache_seconds: int = 30) -> None:
        self._budgets = budgets
        self._seen: Expiring[BudgetKey, str | None]
        self._seen = Expiring(clock, cache_seconds * 1000, most=10_000)

    def suspension(self, key: BudgetKey) -> str | None:
        """The reason the principal is suspended, or None.

        Raises:
            StorageError: the store failed.
        """
        return self._seen.get(key, self._read)

    def _read(self, key: BudgetKey) -> str | None:
        snapshot = self._budgets.get(key)
        return snapshot.suspended_reason if snapshot else None

    def learn(self, key: BudgetKey, reason: str | None) -> None:
        """Remember a principal's state seen or set here."""
        self._seen.put(key, reason)


class DeferredStreaks:
    """Per principal and category, in this container: the streak the store last returned,
    and the refusals held back since (answered from memory, or refused by the store in a
    runaway loop), counted with the next streak sent.
    Shared by the check and the administrators' actions made here, so that what ends a
    stored streak (an allowed call; a reset, resume or raise) ends its deferred part too:
    refusals deferred before a reset never count in the streak after it."""

    def __init__(self) -> None:
        self._streaks: dict[tuple[BudgetKey, str], int] = {}
        self._pending: dict[tuple[BudgetKey, str], int] = {}
        self._since: dict[tuple[BudgetKey, str], int] = {}  # the oldest pending one's time
        self._lock = threading.Lock()

    def defer(self, key: BudgetKey, category: str, after: int, now_ms: int, for_ms: int) -> bool:
        """Whether one more refusal (at `now_ms`) may wait here: only while the streak
        last seen plus the deferred ones stays short of `after`, and the oldest of them
        waited less than `for_ms`."""
        held = (key, category)
        with self._lock:
            known = self._streaks.get(held)
            pending = self._pending.get(held, 0)
            since = self._since.get(held, now_ms) if pending else now_ms
            if known is None or known + pending + 1 >= after or now_ms - since >= for_ms:
                return False
            self._pending[held] = pending + 1
            self._since[held] = since
        return True

    def take(self, key: BudgetKey, category: str) -> int:
        """The refusals deferred for `category`, taken to be counted in the request now
        being sent."""
        with self._lock:
            self._since.pop((key, category), None)
            return self._pending.pop((key, category), 0)

    def since(self, key: BudgetKey, category: str) -> int | None:
        """When the oldest refusal deferred for `category` was made (None: none)."""
        with self._lock:
            return self._since.get((key, category)) if self._pending.get((key, category)) else None

    def pending(self, key: BudgetKey) -> dict[str, int]:
        with self._lock:
            return {c: n for (k, c), n in self._pending.items() if k == key and n}

    def put_back(self, key: BudgetKey, category: str, pending: int) -> None:
        """Refusals a failed request did not count: sent with the next one, at once."""
        with self._lock:
            self._pending[(key, category)] = self._pending.get((key, category), 0) + pending
            self._since[(key, category)] = 0

    def seen(self, key: BudgetKey, category: str, streak: int) -> None:
        with self._lock:
            if len(self._streaks) > 10_000:
                self._streaks.clear()
            self._streaks[(key, category)] = streak

    def ended(self, key: BudgetKey, category: str | None = None) -> None:
        """The principal's streak in `category` (every category's: None) ended."""
        with self._lock:
            for held in (self._streaks, self._pending, self._since):
                for k, c in list(held):
                    if k == key and category in (None, c):
                        del held[(k, c)]


class Escalation:
    """Counts each refusal in its principal's streak in the refused category, and
    suspends at the threshold. A streak follows what the principal does in that
    category: only an allowed call there (or an administrator) ends it, so a loop that
    lists (allowed) and then deletes (refused) is suspended after N refused deletes."""

    def __init__(
        self,
        budgets: BudgetCounters | None,
        gate: PrincipalGate | None,
        after: int,
        streaks: DeferredStreaks | None = None,
        batch_ms: int = STREAK_BATCH_MS,
    ) -> None:
        self._budgets = budgets
        self._gate = gate
        self._after = after
        self._streaks = streaks or DeferredStreaks()
        self._batch_ms = batch_ms

    def defer(self, attempt: Attempt) -> bool:
        """Whether a refusal of a runaway loop (answered from this container, or given by
        the store in one guarded write) may count in its principal's streak with the next
        streak sent: only while the streak this container last saw plus the deferred ones
        stays short of the threshold, so the refusal that suspends is always sent, at the
        same count as before, and for at most `STREAK_BATCH_MS`."""
        if self._budgets is None or attempt.principal is None:
            return True
        key = BudgetKey.principal(attempt.tenant, attempt.principal)
        at = attempt.real_ms
        return self._streaks.defer(key, attempt.category, self._after, at, self._batch_ms)

    def due(self, attempt: Attempt) -> int | None:
        """When the refusals deferred in the attempt's principal's streak must be sent
        (None: none wait)."""
        if self._budgets is None or attempt.principal is None:
            return None
        since = self._streaks.since(
            BudgetKey.principal(attempt.tenant, attempt.principal), attempt.category
        )
        return None if since is None else since + self._batch_ms

    def deferred(self, key: BudgetKey, category: str) -> int:
        """The refusals deferred here for the principal's streak in `category`, taken to
        be counted in the request now being sent."""
        return self._streaks.take(key, category)

    def pending(self, key: BudgetKey) -> dict[str, int]:
        """The refusals deferred here for a principal's streaks, by category: what its
        stored streaks lack until the next refusal sent (a model's or a test's view)."""
        return self._streaks.pending(key)

    def put_back(self, key: BudgetKey, category: str, pending: int, exc: StorageError) -> None:
        """Deferred refusals a failed request did not count: kept for the next one, unless
        it may have counted them (a timeout): never counted twice."""
        if pending and surely_not_written(exc):
            self._streaks.put_back(key, category, pending)

    def seen(self, key: BudgetKey, category: str, streak: int) -> None:
        """Remember the streak the store returned."""
        self._streaks.seen(key, category, streak)

    def allowed(self, attempt: Attempt) -> None:
        """A call of the principal allowed at its scope in the category: the streak there
        ends, and refusals deferred before it would have ended with it."""
        if attempt.principal is not None:
            key = BudgetKey.principal(attempt.tenant, attempt.principal)
            self._streaks.ended(key, attempt.category)

    def after(
        self,
        attempt: Attempt,
        allowed_since_ms: int,
        decision: Refused,
        streak: int | None = None,
    ) -> Refused:
        """Count the refusal in its principal's streak in the call's category; suspend the
        principal when that streak reaches `suspend_after_refusals`. Only the refused
        principal's own run of refusals in the category counts: other principals'
        refusals, and the tenant ceiling's as such, never suspend anyone.
        `allowed_since_ms`: the refused session's last allowed call in the category."""
        if (
            self._budgets is None
            or attempt.principal is None
            or decision.reason is RefusalReason.PRINCIPAL_SUSPENDED
        ):
            return decision
        key = BudgetKey.principal(attempt.tenant, attempt.principal)
        if streak is None:
            # Nothing happened later than now by the check's own clock (a call counted
            # at its counters' start, a millisecond ahead, was still counted before).
            since = min(allowed_since_ms, attempt.real_ms)
            pending = self.deferred(key, attempt.category)
            try:
                streak, _ = self._budgets.note_streak(
                    key, attempt.category, attempt.real_ms, since, refusals=1 + pending
                )
            except StorageError as exc:
                self.put_back(key, attempt.category, pending, exc)
                raise
        self.seen(key, attempt.category, streak)
        if streak < self._after:
            return decision
        return replace(decision, escalated=self.suspend(attempt, streak))

    def flush_deferred(self, attempt: Attempt, allowed_since_ms: int) -> None:
        """Count in the principal's streak the refusals deferred here in the attempt's
        category, with no refusal of their own (a flush after the cache window). They
        never reach the threshold: the refusal that would is always sent.

        Raises:
            StorageError: the store failed (the deferred ones are kept if surely unsent).
        """
        if self._budgets is None or attempt.principal is None:
            return
        key = BudgetKey.principal(attempt.tenant, attempt.principal)
        pending = self.deferred(key, attempt.category)
        if not pending:
            return
        since = min(allowed_since_ms, attempt.real_ms)
        try:
            streak, _ = self._budgets.note_streak(
                key, attempt.category, attempt.real_ms, since, refusals=pending
            )
        except StorageError as exc:
            self.put_back(key, attempt.category, pending, exc)
            raise
        self.seen(key, attempt.category, streak)

    def count_held(self, attempt: Attempt, held: Mapping[str, int] | None) -> int | None:
        """Count the refusals the client answered locally since its last check, by
        category, in its principal's streak there, as if each had been asked: the
        longest streak if one reached `suspend_after_refusals`, else None.

        Raises:
            StorageError: the store failed.
        """
        if self._budgets is None or attempt.principal is None:
            return None
        key = BudgetKey.principal(attempt.tenant, attempt.principal)
        reached = None
        for category, count in sorted((held or {}).items()):
            if count < 1:
                continue
            # Every held refusal followed a refusal the service gave, with no allowed call
            # of that session since: none starts the streak again (`allowed_since_ms` 0).
            # One write adds a category's.
            refusals = min(count, self._after)
            pending = self.deferred(key, category)  # answered from memory here: with them
            try:
                streak, _ = self._budgets.note_streak(
                    key, category, attempt.real_ms, 0, refusals=refusals + pending
                )
            except StorageError as exc:
                self.put_back(key, category, pending, exc)
                raise
            self.seen(key, category, streak)
            if streak >= self._after:
                reached = max(streak, reached or 0)
        return reached

    def suspend(self, attempt: Attempt, refusals: int) -> bool:
        """Suspend the principal of a caller that keeps ignoring refusals; whether this
        check is the one that suspended it (one email per suspension)."""
        if self._budgets is None or attempt.principal is None:
            return False
        key = BudgetKey.principal(attempt.tenant, attempt.principal)
        reason = (
            f"automatic: {refusals} refused calls in a row (suspend_after_refusals is "
            f"{self._after}); an agent that ignores refusals is stopped"
        )
        budgets, done = self._budgets, []
        # The refusal is recorded and its streak counted: a throttle here must not turn
        # it into a 503 (the client's retry would count the streak again).
        retried(lambda: done.append(budgets.suspend(key, reason)[1]))
        newly = done[-1]
        if self._gate is not None:
            self._gate.learn(key, reason)
        return newly
