"""The budgets above the session as steps of one check: which apply, taken at once (one
round trip for all), and given back, over a throttle too, when the check does not stand.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, TypeAlias

from chalicelib.check import deadline
from chalicelib.check.parallel import in_parallel, settled
from chalicelib.check.repairs import Repairs
from chalicelib.check.shadow import SHADOW_CEILING
from chalicelib.check.shards import ShardHints, shard_key, shard_of, shard_spend, take_shard
from chalicelib.observability import count, logger
from chalicelib.quota.core import (
    Attempt,
    BudgetKey,
    BudgetSnapshot,
    LeaseId,
    Scope,
    ScopeUse,
    SessionKey,
    Spend,
)
from chalicelib.quota.leases import Lease
from chalicelib.quota.policy import Category, WindowLimit, shard_part
from chalicelib.quota.writes import WriteId
from chalicelib.storage.ports import (
    BudgetCounters,
    NotTaken,
    StorageError,
    StoreMisconfigured,
    StoreRejected,
    StoreUnavailable,
    Taken,
    WriteUncertain,
)

if TYPE_CHECKING:
    from chalicelib.check.hooks import LimitResolver

COMPENSATION_PAUSES_S = (0.05, 0.2)  # a throttle passes within a few hundred ms


def retried(write: Callable[[], object]) -> None:
    """A write the check needs before it answers, tried again over a throttle, each try
    only if it can end before the check's deadline.

    Raises:
        DeadlineReached: one more try could not end before the deadline.
        StorageError: the store kept failing.
    """
    for pause in (*COMPENSATION_PAUSES_S, None):
        deadline.ensure("finishing a check")
        try:
            write()
            return
        except StorageError:
            if pause is None:
                raise
            time.sleep(pause)


def compensate(
    undo: Callable[[], object], attempt: Attempt, repairs: Repairs | None = None
) -> bool:
    """Undo what a failed check counted, trying again over a throttle while the check's
    deadline allows; whether it was undone. What cannot be undone in time, or while the
    store keeps failing, is owed to the session's next check here (`repairs`); until then
    the count stays one too high (under-admission, never over), and says so: a log line
    and the CompensationFailed or CompensationDeferred metric, never a silent miscount."""
    for pause in (*COMPENSATION_PAUSES_S, None):
        if not deadline.allows_step():
            _owe(undo, attempt, repairs, "CompensationDeferred", "its deadline came")
            return False
        try:
            undo()
            return True
        except StorageError as exc:
            if pause is None:
                _owe(undo, attempt, repairs, "CompensationFailed", exc.doing)
                return False
            time.sleep(pause)
    return False


def _owe(
    undo: Callable[[], object],
    attempt: Attempt,
    repairs: Repairs | None,
    metric: str,
    why: str,
) -> None:
    logger.error(
        "could not give back a call before answering; it is owed to the session's next check",
        extra={
            "tenant": attempt.tenant,
            "session_id": attempt.session_id,
            "category": attempt.category,
            "error": why,
        },
    )
    if repairs is not None:
        repairs.add(attempt.session, undo)
    count(metric, attempt.category)


def surely_not_written(exc: StorageError) -> bool:
    """Whether a failed write certainly changed nothing (throttled, refused outright), as
    opposed to a timeout or server error, after which it may have been applied."""
    if isinstance(exc, StoreUnavailable):
        return exc.throttled
    return isinstance(exc, StoreMisconfigured | StoreRejected)


@dataclass(frozen=True)
class Step:
    """One wider budget a check counts against."""

    key: BudgetKey
    window: WindowLimit
    spend: Spend
    shadow_limit: int | None = None  # shadow mode: the limit a refusal would enforce
    # A sharded budget's step as it went: `key` and `spend` are then the shard's item and
    # part, and this the step over the whole budget (its first-refusal mark, its hints).
    whole: Step | None = None

    @property
    def budget(self) -> Step:
        """The step over the whole budget (itself, unless it went to a shard)."""
        return self.whole or self

    def to_shard(self, shard: int) -> Step:
        """This step as it goes to one shard of its budget: the shard's item and part."""
        shards = self.window.shards
        shadow = self.shadow_limit and shard_part(self.shadow_limit, shards, shard)
        spend = shard_spend(self.spend, shards, shard)
        return replace(
            self, key=shard_key(self.key, shard), spend=spend, shadow_limit=shadow, whole=self
        )


# What the wider budgets did with a call: the steps that took (with their budgets), and
# the first that refused (with the budget as it was), if any.
Outcome: TypeAlias = tuple[
    list[tuple[Step, BudgetSnapshot]], tuple[Step, BudgetSnapshot | None] | None
]


class WiderBudgets:
    """The steps of a check above its session, and what undoes them."""

    def __init__(
        self, budgets: BudgetCounters, limits: LimitResolver, repairs: Repairs | None = None
    ) -> None:
        self._budgets = budgets
        self._limits = limits
        self._repairs = repairs
        # Wider budgets this container last saw refusing (category, window, limit): a
        # hint for the order of the steps, never a decision.
        self._refusing: dict[BudgetKey, tuple[str, int, int]] = {}
        # What this container last saw of the tenant's shards, and which first-refusal
        # marks it knows are set: hints that save writes, never decisions.
        self._hints = ShardHints()

    @staticmethod
    def windows(attempt: Attempt, category: Category) -> list[WindowLimit]:
        """The category's windows above the session that count this attempt: a
        principal's only when the attempt names one."""
        return [
            w
            for w in category.windows
            if w.scope is not Scope.PRINCIPAL or attempt.principal is not None
        ]

    def steps(self, attempt: Attempt, category: Category) -> list[Step]:
        steps = []
        for window in self.windows(attempt, category):
            if window.scope is Scope.PRINCIPAL:
                assert attempt.principal is not None
                key = BudgetKey.principal(attempt.tenant, attempt.principal)
            else:
                key = BudgetKey.whole_tenant(attempt.tenant)
            limit = self._limits.window_limit(
                attempt.tenant, attempt.principal, window, category.name, attempt.real_ms
            )
            shown = limit
            limit = limit if category.enforce else SHADOW_CEILING
            spend = Spend(
                category.name,
                limit,
                window.window_start_ms(attempt.real_ms),
                window.window_end_ms(attempt.real_ms),
                attempt.real_ms,
                attempt.units,
            )
            steps.append(Step(key, window, spend, None if category.enforce else shown))
        return steps

    def take_all(self, attempt: Attempt, steps: list[Step]) -> Outcome:
        """Take from every wider budget at once: the steps that took, and the first that
        refused (with the budget as it was), if any.

        Raises:
            StorageError: a step failed; what the others took was given back first.
        """
        if self.known_refusing(steps):
            # A budget this container saw refusing in this window: one step at a time,
            # so a loop against it stops at its refusal and touches nothing else.
            went: list[tuple[Step, Taken | NotTaken | StorageError]] = []
            for step in steps:
                went.append(self._take(step))
                if not isinstance(went[-1][1], Taken):
                    break
        else:
            went = in_parallel([partial(self._take, step) for step in steps])
        for step, result in went:
            if isinstance(result, NotTaken):
                if len(self._refusing) > 10_000:
                    self._refusing.clear()
                self._refusing[step.budget.key] = seen_as(step.budget)
            elif isinstance(result, Taken):
                self._refusing.pop(step.budget.key, None)
        taken = [(step, result.snapshot) for step, result in went if isinstance(result, Taken)]
        for _, result in went:
            if isinstance(result, StorageError):
                # What took goes back, and a take whose answer never came if it applied.
                unsure = [(s, r.write) for s, r in went if isinstance(r, WriteUncertain)]
                compensate(self.giving_back(taken, unsure), attempt, self._repairs)
                raise result
        for step, result in went:
            if isinstance(result, NotTaken):
                return taken, (step, result.snapshot)
        return taken, None

    def _take(self, step: Step) -> tuple[Step, Taken | NotTaken | StorageError]:
        """One wider step, as it went (to which shard of a sharded budget), its failure
        returned rather than raised."""
        if step.window.shards == 1:
            return step, attempt_take(self._budgets, step)
        shard, result = take_shard(
            self._budgets, self._hints, step.key, step.spend, step.window.shards
        )
        return step.to_shard(shard), result

    def note_refusal(self, step: Step) -> bool:
        """Mark a wider budget's refusal (one mark per window and limit, on the budget's
        first item): whether it is the first. Nothing is written when this container
        knows the mark is set already, so a spent tenant's refusals write nothing.

        Raises:
            StorageError: the store failed.
        """
        budget = step.budget
        if not self._hints.claim_mark(budget.key, budget.spend):
            return False
        try:
            return self._budgets.note_refusal(budget.key, budget.spend)
        except BaseException:
            self._hints.unclaim_mark(budget.key, budget.spend)
            raise

    def known_refusing(self, steps: Sequence[Step]) -> bool:
        """Whether this container last saw one of these budgets refusing, in this window
        and at this limit (a hint: the check then counts one scope at a time)."""
        return any(self._refusing.get(step.key) == seen_as(step) for step in steps)

    def end_streaks(self, attempt: Attempt, taken: list[tuple[Step, BudgetSnapshot]]) -> None:
        """A call allowed at every scope ends its principal's streak of refusals in the
        call's category (other categories' streaks stand): one more write, only when the
        principal's budget showed a streak there."""
        category = attempt.category
        for step, budget in taken:
            if step.window.scope is Scope.PRINCIPAL and budget.streak(category) > 0:
                self._budgets.end_streak(step.key, category, attempt.real_ms)

    def giving_back(
        self,
        taken: Iterable[tuple[Step, BudgetSnapshot]],
        unsure: Iterable[tuple[Step, WriteId]] = (),
    ) -> GiveBack:
        """What undoes these takes (and these takes whose answers never came, if they
        applied), each once however often it is tried."""
        return GiveBack(self._budgets, self._hints, [s for s, _ in taken], unsure)

    def give_back_lease(
        self,
        session: SessionKey,
        principal: str | None,
        category: Category,
        lease: LeaseId,
        unused: int,
        now_ms: int,
    ) -> None:
        """Give a returned lease's unused calls back to the wider budgets, best effort,
        only in the window that granted them (the session has taken them back)."""
        for window in category.windows:
            if window.window_start_ms(now_ms) != window.window_start_ms(lease.granted_ms):
                continue
            limit = window.limit
            if window.scope is Scope.PRINCIPAL:
                if principal is None:
                    continue
                key = BudgetKey.principal(session.tenant, principal)
            else:
                # Back to the shard that counted the lease (shard 0 for older ids).
                shard = lease.shard if lease.shard < window.shards else 0
                key = shard_key(BudgetKey.whole_tenant(session.tenant), shard)
                limit = shard_part(limit, window.shards, shard)
            spend = Spend(
                category.name,
                limit,
                window.window_start_ms(now_ms),
                window.window_end_ms(now_ms),
                now_ms,
                unused,
            )
            try:
                self._budgets.give_back(key, spend)
                self._hints.gave_back(key, spend)
            except StorageError as exc:
                # The wider budget keeps them until its window ends (under-admission).
                logger.warning(
                    "lease return: a wider budget kept its calls",
                    extra={"scope": key.scope.value, "error": exc.doing},
                )


@dataclass(frozen=True)
class _Owed:
    """One give-back a check owes: a step's take, or one whose answer never came."""

    step: Step
    again: WriteId | None = None  # a give-back whose answer never came: sent again so
    take: WriteId | None = None  # a take whose answer never came: back if it applied


class GiveBack:
    """What a check that does not stand gives back to the wider budgets, at once: each
    step once, however often it is tried again (over a throttle, by the session's next
    check); a give-back whose answer never came is sent again under its own number, so
    the store applies it once."""

    def __init__(
        self,
        budgets: BudgetCounters,
        hints: ShardHints,
        steps: Iterable[Step],
        unsure: Iterable[tuple[Step, WriteId]] = (),
    ) -> None:
        self._budgets = budgets
        self._hints = hints
        self._lock = threading.Lock()
        self._owed = [_Owed(step) for step in steps] + [_Owed(s, take=w) for s, w in unsure]

    def __call__(self) -> None:
        """Give back what is still owed.

        Raises:
            StorageError: the store failed for one (the others stay given back).
        """
        with self._lock:
            owed = list(self._owed)
        results = settled([partial(self._one, one) for one in owed])
        left: list[_Owed] = []
        failed: BaseException | None = None
        for one, result in zip(owed, results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, WriteUncertain) and one.take is None:
                    left.append(replace(one, again=result.write))
                else:
                    left.append(one)
                failed = failed or result
            else:
                self._hints.gave_back(one.step.key, one.step.spend)  # it has room again
        with self._lock:
            self._owed = left
        if failed is not None:
            raise failed

    def _one(self, one: _Owed) -> None:
        key, spend = one.step.key, one.step.spend
        if one.take is not None:
            self._budgets.give_back_if_taken(key, spend, one.take)
        else:
            self._budgets.give_back(key, spend, one.again)


def attempt_take(budgets: BudgetCounters, step: Step) -> Taken | NotTaken | StorageError:
    """One wider step, its failure returned rather than raised: the steps run at once,
    and what the others took must be given back before a failure is answered."""
    try:
        return budgets.take(step.key, step.spend)
    except StorageError as exc:
        return exc


def seen_as(step: Step) -> tuple[str, int, int]:
    """What a refusal of a wider budget was seen at: its category, window and limit."""
    return step.spend.category, step.spend.window_start_ms, step.spend.limit


def leased_from(lease: Lease | None, taken: Iterable[tuple[Step, BudgetSnapshot]]) -> Lease | None:
    """A lease as granted, naming the tenant shard that counted it (its return goes back
    there)."""
    if lease is None:
        return None
    for step, _ in taken:
        if step.key.scope is Scope.TENANT:
            return replace(lease, shard=shard_of(step.key))
    return lease


def use_of(step: Step, snapshot: BudgetSnapshot) -> ScopeUse:
    """Where a step's budget stands, as an answer shows it. A shard's figures are scaled
    to the whole budget (an estimate: takes spread at random; exact when the shard is
    spent or the budget is one item); GET /v1/tenant sums the shards."""
    spend = step.spend
    used = snapshot.used(spend.category, spend.window_start_ms)
    limit = snapshot.limit_for(spend.category, step.shadow_limit or spend.limit)
    whole = step.whole
    if whole is not None and limit > 0:
        total = whole.shadow_limit or whole.spend.limit
        used, limit = min(total, -(-used * total // limit)), total  # rounded up
    return ScopeUse(
        scope=step.window.scope,
        used=used,
        limit=limit,
        window_seconds=step.window.window_seconds,
        resets_at_ms=spend.window_end_ms,
    )


def room_of(step: Step, snapshot: BudgetSnapshot) -> int:
    """The calls one take can still get from where a step went (its shard, if sharded)."""
    spend = step.spend
    limit = snapshot.limit_for(spend.category, step.shadow_limit or spend.limit)
    return max(0, limit - snapshot.used(spend.category, spend.window_start_ms))
