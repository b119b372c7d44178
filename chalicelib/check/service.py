"""The check: classify the call, count it against every budget that applies (session,
principal, tenant), all or nothing, and explain a refusal.

Counting order: the session and the wider budgets at once when the session has room
(`check/at_once.py`), else the session first (a runaway session is refused there and
never touches the wider budgets); after the answer, a call id's admission (`check.life`:
only then is a copy of it a duplicate). When a wider budget refuses or fails (throttled,
down), what the others took is given back and the session's count is taken back before
the answer, so a retry with the same call id is counted anew at every scope. Every step
is a conditional increment that never passes its limit (no budget is over-admitted); a
crash between steps leaves a call counted that did not run (under-admission)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from typing import TypeAlias

from chalicelib.check import deadline
from chalicelib.check.afterwards import Afterwards
from chalicelib.check.at_once import AtOnce
from chalicelib.check.attempts import attempt_of
from chalicelib.check.copies import MAX_ROUNDS, answer_copy
from chalicelib.check.escalation import DeferredStreaks, Escalation, PrincipalGate
from chalicelib.check.hooks import DecisionListener, LimitResolver, PolicyLimits, QuietListener
from chalicelib.check.lease_returns import return_lease
from chalicelib.check.life import Admissions
from chalicelib.check.repairs import Repairs
from chalicelib.check.repeats import repeated
from chalicelib.check.requests import CheckRequest, HeldReport, LeaseReturn
from chalicelib.check.runaway import AdminChanges, RunawayLoops
from chalicelib.check.shadow import would_refuse
from chalicelib.check.shaping import (
    allowed_answer,
    principal_suspended,
    session_refusal,
    wider_refusal,
)
from chalicelib.check.steps import (
    Step,
    WiderBudgets,
    compensate,
    leased_from,
    retried,
    room_of,
    surely_not_written,
    use_of,
)
from chalicelib.check.tickets import HoldTickets
from chalicelib.check.verdicts import copy_of_used_id, try_again_as
from chalicelib.clock import Clock
from chalicelib.quota.answers import Allowed, Decision, Refused
from chalicelib.quota.core import (
    Attempt,
    BudgetKey,
    BudgetSnapshot,
    RefusalReason,
    Scope,
    SessionKey,
    SessionSnapshot,
    Verdict,
)
from chalicelib.quota.derived import oversized_basis
from chalicelib.quota.facts import within
from chalicelib.quota.policy import Policy
from chalicelib.quota.rules import explain_refusal
from chalicelib.storage.ports import (
    BudgetCounters,
    Consumed,
    NotConsumed,
    RecordChanged,
    SessionChecks,
    StorageError,
    StoreUnavailable,
)

# A call counted in its session: allowance, session after, attempt (a lease may shrink).
Counted: TypeAlias = tuple[Allowed, SessionSnapshot, Attempt]


class CheckService:
    """Answers `POST /v1/check`."""

    def __init__(
        self,
        policy: Policy,
        store: SessionChecks,
        clock: Clock,
        idle_timeout_seconds: int,
        limits: LimitResolver | None = None,
        listener: DecisionListener | None = None,
        keep_calls: int = 10,
        budgets: BudgetCounters | None = None,
        gate: PrincipalGate | None = None,
        tickets: HoldTickets | None = None,
        changes: AdminChanges | None = None,
        refusal_cache_ms: int = 0,
        streaks: DeferredStreaks | None = None,
        kept_answers: Callable[[Attempt], bool] = lambda attempt: False,
        afterwards: Afterwards | None = None,
    ) -> None:
        self._policy = policy
        self._after = afterwards or Afterwards()  # writes no answer waits for
        self._admissions = Admissions(store, self._after)
        self._admitted = self._admissions.made_here  # a copy waits for its call's
        self._kept_answers = kept_answers  # a copy past its duplicates, from its result
        self._tickets = tickets or HoldTickets(lambda: None, None, policy.suspend_after_refusals)
        self._store = store
        self._clock = clock
        self._idle_ms = idle_timeout_seconds * 1000
        self._limits = limits or PolicyLimits(policy)
        self._listener = listener or QuietListener()
        self._keep = keep_calls
        self._budgets = budgets
        self._gate = gate or (PrincipalGate(budgets, clock) if budgets else None)
        self._repairs = Repairs()  # give-backs owed to a session's next check here
        self._wider = WiderBudgets(budgets, self._limits, self._repairs) if budgets else None
        self._at_once = AtOnce(self._wider, self._repairs)
        self._escalation = Escalation(budgets, self._gate, policy.suspend_after_refusals, streaks)
        self._spent = RunawayLoops(keep_calls, changes, refusal_cache_ms)  # seen spent here

    def attempt_for(self, tenant: str, request: CheckRequest) -> Attempt:
        """Classify the call and resolve its limit: everything decided before any write."""
        return attempt_of(self._policy, self._limits, tenant, request, self._clock(), self._idle_ms)

    def check(self, tenant: str, request: CheckRequest) -> Decision:
        """Count the call against every budget that applies, or refuse it; a refusal
        that starts the client's hold carries its ticket.

        Raises:
            CallIdConflict: the call id was counted for another tool or category.
            StorageError: the store failed, or the session kept changing under us. What
                this check had counted was given back first.
        """
        decision = self._decide(tenant, request)
        if isinstance(decision, Refused):
            return self._tickets.vouch(tenant, decision)
        return decision

    def _decide(self, tenant: str, request: CheckRequest) -> Decision:
        """The check's decision, before a refusal is vouched for (raises as `check`)."""
        attempt = self.attempt_for(tenant, request)
        self._spent.flush_due(attempt, self._store, self._escalation, self._after_answer)
        if self._repairs.pending(attempt.session):
            self._repairs.run(attempt.session)
        category = self._policy.categories[attempt.category]
        attempt, escalated = self._count_held(attempt, request.refused_locally)
        if escalated is not None:
            return escalated
        if self._gate is not None and attempt.principal is not None:
            key = BudgetKey.principal(tenant, attempt.principal)
            if self._gate.suspension(key) is not None:
                return principal_suspended(attempt)
        if not within(0, attempt.units, attempt.base_limit):
            oversized = self._refuse_oversized(attempt)
            if oversized is not None:
                return oversized
        # A runaway loop's next call, refused without counting it first.
        expected = self._spent.refuse(attempt, self._store, self._escalation, self._listener)
        if expected is not None:
            return expected
        count = partial(self._count_session, self._with_wider(attempt))
        counted, steps, went = self._at_once.count(count, attempt, category)
        if isinstance(counted, Refused):
            return counted
        # The attempt as counted: a lease at the end of the budget has fewer units.
        allowed, snapshot, attempt = counted
        if allowed.duplicate or not steps or self._wider is None:
            self._listener.on_counted(attempt.tenant, attempt, allowed)
            return self._shadowed(attempt, allowed, snapshot)
        try:
            taken, refusal = self._at_once.outcome(attempt, steps, went)
        except StorageError:
            # Nothing may stay counted for a call answered 503: its retry counts anew.
            self._undo(attempt, snapshot, [])
            raise
        return self._settle(tenant, request, (allowed, snapshot, attempt), taken, refusal)

    def _undo(
        self,
        attempt: Attempt,
        snapshot: SessionSnapshot,
        taken: list[tuple[Step, BudgetSnapshot]],
    ) -> bool:
        """Give back what this check counted (the wider budgets that took, then its
        session); whether all of it was given back before answering (else it is owed to
        the session's next check here)."""
        wider, repairs = self._wider, self._repairs
        done = True
        if wider is not None and taken:
            undo = wider.giving_back(taken)
            done = compensate(undo, attempt, repairs)
        uncount = partial(self._store.uncount, attempt, snapshot.started_ms)
        return compensate(uncount, attempt, repairs) and done

    def _settle(
        self,
        tenant: str,
        request: CheckRequest,
        counted: Counted,
        taken: list[tuple[Step, BudgetSnapshot]],
        refusal: tuple[Step, BudgetSnapshot | None] | None,
    ) -> Decision:
        """A call counted in its session, and what the wider budgets did with it: admitted
        at every scope, or refused by one (what was taken goes back before any answer).

        Raises:
            StorageError: the store failed; nothing stays counted.
        """
        allowed, snapshot, attempt = counted
        wider = self._wider
        assert wider is not None
        if refusal is None:
            try:
                retried(partial(wider.end_streaks, attempt, taken))
            except StorageError:
                # Counted everywhere, but the principal's streak still stands: answered
                # 503, so nothing may stay counted (a retry counts it anew).
                self._undo(attempt, snapshot, taken)
                raise
            # Counted at every scope: the admission does not hold up the answer.
            self._admissions.after_answer(attempt, snapshot)
            if any(s.window.scope is Scope.PRINCIPAL for s, _ in taken):
                self._escalation.allowed(attempt)
            self._listener.on_counted(attempt.tenant, attempt, allowed)
            scopes = tuple(use_of(s, b) for s, b in taken)
            allowed = replace(allowed, scopes=scopes, lease=leased_from(allowed.lease, taken))
            return self._shadowed(attempt, allowed, snapshot)
        # Refused by a wider budget: what was taken goes back before any answer, over a
        # throttle too (a 503 here must leave nothing counted, as on the fault path).
        if not self._undo(attempt, snapshot, taken):
            raise StoreUnavailable("giving back a call a wider budget refused")
        step, seen = refusal
        suspended = seen is not None and seen.suspended
        remaining = room_of(step, seen or BudgetSnapshot())  # in one take (one shard)
        if attempt.leased and attempt.units > 1 and not suspended and remaining:
            # A wider budget had room for fewer calls than the lease: what remains there.
            smaller = min(remaining, attempt.units - 1)
            # The client's report was counted above (its tickets are claimed): not again.
            request = replace(request, lease=smaller, asked=attempt.asked, refused_locally=None)
            return self._decide(tenant, request)
        since = snapshot.last_allowed_ms(besides=attempt, category=attempt.category)
        return self._refuse_wider(attempt, snapshot, refusal, taken, since)

    # -- the session -------------------------------------------------------------------

    def deferred_streaks(self, tenant: str, principal: str) -> dict[str, int]:
        """`Escalation.pending`: refusals answered from memory here, not in the streaks yet."""
        return self._escalation.pending(BudgetKey.principal(tenant, principal))

    def flush_held(self) -> None:
        """Record now all that runaway loops hold back here, due or not (at shutdown)."""
        self._spent.flush_held(self._store, self._escalation)

    def _consume(self, attempt: Attempt) -> Consumed | NotConsumed:
        """One conditional count of the call in its session, before the deadline.

        Raises:
            DeadlineReached: it could not end before the check's deadline.
            StorageError: the store failed. If the count may have been applied (a
                timeout, not a throttle), taking it back is owed to the session's next
                check here: it may land after this check's 503.
        """
        deadline.ensure("counting a call")
        try:
            return self._store.consume(attempt)
        except StorageError as exc:
            if not surely_not_written(exc):
                undo = partial(self._store.uncount, attempt, None)
                self._repairs.add(attempt.session, undo, final=False)
            raise

    def _count_session(self, attempt: Attempt) -> Counted | Refused:
        epoch = self._spent.changes.epoch  # read before the store is asked
        for _ in range(MAX_ROUNDS):
            result = self._consume(attempt)
            if isinstance(result, Consumed):
                self._spent.forget(attempt.session)  # its last calls changed
                return self._allowed(attempt, result.snapshot), result.snapshot, attempt
            snapshot = result.snapshot
            if snapshot is None:
                continue
            verdict = explain_refusal(snapshot, attempt)
            kept = copy_of_used_id(attempt, snapshot, verdict, self._kept_answers, self._admitted)
            if kept is None:
                continue
            if kept or verdict is Verdict.ALREADY_COUNTED:
                return self._allowed(attempt, snapshot, duplicate=kept), snapshot, attempt
            if verdict is Verdict.EXPIRED:
                reset = self._store.reset_expired(attempt, snapshot)
                if reset is not None:
                    return self._allowed(attempt, reset.snapshot), reset.snapshot, attempt
                continue
            if verdict is Verdict.DUPLICATE:
                if self._store.record_replay(attempt, snapshot):
                    return self._allowed(attempt, snapshot, duplicate=True), snapshot, attempt
                continue
            again = try_again_as(attempt, snapshot, verdict)
            if again is not None:
                attempt = again
                continue
            decision = self._refuse(attempt, snapshot, verdict)
            if decision is not None and verdict is Verdict.OVER_LIMIT:
                self._spent.remember(attempt, snapshot, epoch)
            if decision is not None:
                since = snapshot.last_allowed_ms(category=attempt.category)
                decision = self._escalation.after(attempt, since, decision)
                self._listener.on_block(attempt.tenant, attempt, decision)
                return decision
        raise RecordChanged("counting a call")

    def _allowed(
        self, attempt: Attempt, snapshot: SessionSnapshot, duplicate: bool = False
    ) -> Allowed:
        category = self._policy.categories[attempt.category]
        return allowed_answer(attempt, snapshot, category, self._keep, duplicate)

    def _with_wider(self, attempt: Attempt) -> Attempt:
        """The attempt, marked if budgets above the session count it too: counted in its
        session, the call then stays in progress until they have."""
        category = self._policy.categories[attempt.category]
        # Which windows apply, not their limits: nothing is resolved twice.
        if self._wider is None or not self._wider.windows(attempt, category):
            return attempt
        return replace(attempt, wider=True)

    def _refused_suspended(self, attempt: Attempt, snapshot: SessionSnapshot) -> Refused | None:
        """A suspended session idle past the timeout: its counters start again with this
        refusal (idle expiry holds while suspended too). None if it changed meanwhile."""
        restarted = self._store.restart_suspended(attempt, snapshot)
        if restarted is None:
            return None
        limit = restarted.limit_for(attempt.category, attempt.base_limit, attempt.now_ms)
        reason = RefusalReason.SESSION_SUSPENDED
        return session_refusal(attempt, restarted, limit, reason, self._keep, recorded=True)

    def _refuse(
        self, attempt: Attempt, snapshot: SessionSnapshot, verdict: Verdict
    ) -> Refused | None:
        suspended = verdict is Verdict.SUSPENDED
        if suspended and snapshot.is_idle(attempt.now_ms, self._idle_ms):
            return self._refused_suspended(attempt, snapshot)
        limit = snapshot.limit_for(attempt.category, attempt.base_limit, attempt.now_ms)
        if verdict is Verdict.REPEATED:  # the loop breaker: the limit is not at stake
            if self._store.record_block(attempt, snapshot, limit, False, marks=False) is None:
                return None
            refusal = session_refusal(
                attempt, snapshot, limit, RefusalReason.REPEATED_CALL, self._keep
            )
            return repeated(refusal, attempt)
        if (
            attempt.weight > 1
            and not suspended
            and snapshot.counts.get(attempt.category, 0) < limit
        ):
            # Weighed units that do not fit a budget with room left: the session is not
            # spent, so no exhaustion is marked (nor emailed); nothing is written.
            reason = RefusalReason.QUOTA_EXCEEDED
            return session_refusal(attempt, snapshot, limit, reason, self._keep)
        first = self._store.record_block(attempt, snapshot, limit, suspended)
        if first is None:
            return None
        reason = RefusalReason.SESSION_SUSPENDED if suspended else RefusalReason.QUOTA_EXCEEDED
        return session_refusal(attempt, snapshot, limit, reason, self._keep, first)

    # -- weighed calls, shadow mode, refusals a client held (issue 22) -------------------

    def _refuse_oversized(self, attempt: Attempt) -> Refused | None:
        """A call weighing more units than the base limit: it fits only under a session
        raise, so the session is read first (the store's condition for a new or expired
        session would count it whole). None: it may fit; the check goes the usual way.

        Raises:
            StorageError: the store failed.
        """
        seen = oversized_basis(self._store.get(attempt.session), attempt)
        if seen is None:
            return None
        limit = seen.limit_for(attempt.category, attempt.base_limit, attempt.now_ms)
        decision = session_refusal(attempt, seen, limit, RefusalReason.QUOTA_EXCEEDED, self._keep)
        since = seen.last_allowed_ms(category=attempt.category)
        decision = self._escalation.after(attempt, since, decision)
        self._listener.on_block(attempt.tenant, attempt, decision)
        return decision

    def _shadowed(self, attempt: Attempt, allowed: Allowed, seen: SessionSnapshot) -> Allowed:
        """The allowed answer, with any refusal shadow mode let pass (`seen`: as counted)."""
        repeat = self._policy.categories[attempt.category].repeat
        would = would_refuse(attempt, allowed, seen, repeat)
        if would is None:
            return allowed
        self._listener.on_shadow(attempt.tenant, attempt, would)
        return replace(allowed, shadow=would)

    def _count_held(
        self, attempt: Attempt, held: Mapping[str, HeldReport] | None
    ) -> tuple[Attempt, Refused | None]:
        """Count the refusals the client held that the service vouched for (each ticket
        once, up to its maximum) in the streak of the principal the ticket names. Returns
        the attempt with the caller's own folded in, and its principal's suspension if
        they took its streak to `suspend_after_refusals` (the check is then refused).

        Raises:
            StorageError: the store failed.
        """
        answer = None
        for vouched in self._tickets.redeem(attempt, held or {}):
            own = vouched.principal == attempt.principal
            if own and vouched.category == attempt.category:
                attempt = replace(attempt, held=attempt.held + vouched.refusals)
            whose = replace(attempt, principal=vouched.principal, category=vouched.category)
            streak = self._escalation.count_held(whose, {vouched.category: vouched.refusals})
            if streak is None:
                continue
            decision = principal_suspended(attempt if own else whose)
            decision = replace(decision, escalated=self._escalation.suspend(whose, streak))
            self._listener.on_block(attempt.tenant, attempt if own else whose, decision)
            if own:
                answer = decision
        return attempt, answer

    # -- the wider budgets ---------------------------------------------------------------

    def _refuse_wider(
        self,
        attempt: Attempt,
        session: SessionSnapshot | None,
        refusal: tuple[Step, BudgetSnapshot | None],
        taken: list[tuple[Step, BudgetSnapshot]],
        allowed_since_ms: int,
    ) -> Refused:
        """The refusal of a wider budget: nothing stays counted anywhere."""
        assert self._budgets is not None
        step, snapshot = refusal
        use = use_of(step, snapshot or BudgetSnapshot())
        suspended = snapshot is not None and snapshot.suspended
        if suspended and self._gate is not None:
            self._gate.learn(step.key, snapshot.suspended_reason if snapshot else None)
        first, streak = False, None
        own = step.window.scope is Scope.PRINCIPAL
        # Weighed units that do not fit a budget with room left: no exhaustion mark.
        spent = use.remaining < 1
        if own and not suspended:
            # The principal's own budget refused: its mark and its streak in one write.
            since = min(allowed_since_ms, attempt.real_ms)  # nothing is later than now
            mark = step.spend if spent else None
            pending = self._escalation.deferred(step.key, attempt.category)
            try:
                streak, first = self._budgets.note_streak(
                    step.key, attempt.category, attempt.real_ms, since, mark, 1 + pending
                )
            except StorageError as exc:
                self._escalation.put_back(step.key, attempt.category, pending, exc)
                raise
        elif not suspended and spent and self._wider is not None:
            first = self._wider.note_refusal(step)
        uses = [use_of(s, b) for s, b in taken if s.window.scope is not step.window.scope]
        reason = RefusalReason.PRINCIPAL_SUSPENDED if suspended else RefusalReason.QUOTA_EXCEEDED
        scope = step.window.scope
        decision = wider_refusal(attempt, session, scope, (*uses, use), reason, first, self._keep)
        decision = self._escalation.after(attempt, allowed_since_ms, decision, streak)
        self._listener.on_block(attempt.tenant, attempt, decision)
        return decision

    # -- returned leases -------------------------------------------------------------

    def return_lease(self, tenant: str, request: LeaseReturn) -> int:
        """`leases.return_lease` with this service's policy, stores and clock.

        Raises:
            StorageError: the store failed before the session took the calls back.
        """
        now_ms = self._clock()
        cutoff_ms = now_ms - self._idle_ms
        self._spent.forget(SessionKey(tenant, request.session_id))  # it has room again
        return return_lease(
            self._policy, self._store, self._wider, tenant, request, now_ms, cutoff_ms
        )

    def answer_copy(self, tenant: str, request: CheckRequest) -> Allowed | None:
        """`copies.answer_copy` with this service's store, kept results and answers.

        Raises:
            CallIdConflict, CallInProgress, StorageError: as `copies.answer_copy`.
        """
        attempt = self.attempt_for(tenant, request)
        answered = self._copy_answered
        return answer_copy(attempt, self._store, self._kept_answers, answered, self._admitted)

    def _after_answer(self, flush: Callable[[], None]) -> None:
        self._after.later("held back", flush, "recording refusals held back")

    def _copy_answered(self, attempt: Attempt, snapshot: SessionSnapshot) -> Allowed:
        allowed = self._allowed(attempt, snapshot, duplicate=True)
        self._listener.on_counted(attempt.tenant, attempt, allowed)
        return self._shadowed(attempt, allowed, snapshot)
