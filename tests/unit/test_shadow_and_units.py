"""The pure parts of issue 22: weighed units are never cut like a lease, and shadow mode
judges a counted call against the policy's limits (the loop breaker's too), not the
ceiling the store counted to."""

from __future__ import annotations

from dataclasses import replace

from chalicelib.check.repeats import with_repeat
from chalicelib.check.shadow import SHADOW_CEILING, shadow_message, would_refuse
from chalicelib.quota.answers import Allowed, Refused
from chalicelib.quota.core import (
    Attempt,
    RefusalReason,
    Scope,
    ScopeUse,
    SessionKey,
    SessionSnapshot,
)
from chalicelib.quota.policy import Category, RepeatLimit
from chalicelib.quota.rules import admits, partial_units
from tests.support import T0

HOUR = 3_600_000
BREAKER = RepeatLimit(limit=3, window_seconds=600)
SEEN = SessionSnapshot(last_seen_ms=T0, started_ms=T0)


def attempt(units: int = 1, leased: bool = False, shadow: int | None = 15) -> Attempt:
    return Attempt(
        session=SessionKey("demo", "s1"),
        tool="delete_tags",
        category="write",
        base_limit=SHADOW_CEILING if shadow is not None else 15,
        now_ms=T0,
        idle_ms=HOUR,
        check_id="chk001",
        units=units,
        leased=leased,
        asked=units,
        shadow_limit=shadow,
    )


def allowed(used: int, limit: int = 15, scopes: tuple[ScopeUse, ...] = ()) -> Allowed:
    return Allowed("s1", "delete_tags", "write", used, limit, T0, T0 + HOUR, scopes=scopes)


def test_weighed_units_are_never_granted_in_part() -> None:
    snapshot = SessionSnapshot(last_seen_ms=T0, started_ms=T0, counts={"write": 12})
    assert partial_units(snapshot, attempt(5, shadow=None)) == 0
    assert partial_units(snapshot, attempt(5, leased=True, shadow=None)) == 3


def test_a_call_that_fits_is_no_shadow_refusal() -> None:
    assert would_refuse(attempt(3), allowed(15), SEEN, None) is None
    assert would_refuse(attempt(), allowed(20, limit=30), SEEN, None) is None  # a raise counts
    assert (
        would_refuse(attempt(shadow=None), allowed(16), SEEN, None) is None
    )  # enforcing: not judged


def test_the_first_call_past_the_limit_is_judged_as_its_refusal() -> None:
    would = would_refuse(attempt(3), allowed(17), SEEN, None)
    assert isinstance(would, Refused) and would.reason is RefusalReason.QUOTA_EXCEEDED
    assert (would.scope, would.used, would.limit, would.units) == (Scope.SESSION, 14, 15, 3)
    assert "asks for 3 'write' units" in would.message and "has 1 unit left" in would.message


def test_a_lease_is_refused_only_when_nothing_remained() -> None:
    cut = would_refuse(attempt(5, leased=True), allowed(18), SEEN, None)  # 13 before: 2 remained
    assert cut is None
    spent = would_refuse(
        attempt(5, leased=True), allowed(20), SEEN, None
    )  # 15 before: none remained
    assert spent is not None and spent.units == 1


def test_a_wider_scope_is_judged_after_the_session() -> None:
    principal = ScopeUse(
        Scope.PRINCIPAL, used=101, limit=100, window_seconds=86400, resets_at_ms=T0 + 86_400_000
    )
    would = would_refuse(attempt(), allowed(3, scopes=(principal,)), SEEN, None)
    assert would is not None and would.scope is Scope.PRINCIPAL
    assert (would.used, would.limit) == (100, 100)
    assert replace(would, units=1).resets_at_ms == T0 + 86_400_000


def repeating(shadow: int | None = 15) -> Attempt:
    """A write with an arguments digest in a category whose breaker allows 3 per 10 min."""
    category = Category("write", 15, 150, False, enforce=shadow is None, repeat=BREAKER)
    return with_repeat(attempt(shadow=shadow), category, "ab" * 32)


def counted(a: Attempt, repeats: int) -> SessionSnapshot:
    """The session after counting `a` as its `repeats`th call with the same arguments."""
    assert a.repeat_key is not None
    return SessionSnapshot(T0, T0, counts={"write": repeats}, repeats={a.repeat_key: repeats})


def test_the_store_counts_shadowed_repeats_past_the_breaker() -> None:
    shadowed, enforced = repeating(), repeating(shadow=None)
    assert shadowed.repeat_key == enforced.repeat_key is not None
    assert (shadowed.repeat_limit, enforced.repeat_limit) == (SHADOW_CEILING, 3)
    assert admits(counted(shadowed, 40), shadowed)
    assert not admits(counted(enforced, 3), enforced)


def test_a_shadowed_repeat_past_the_breaker_is_judged_as_its_refusal() -> None:
    a = repeating()
    assert would_refuse(a, allowed(3), counted(a, 3), BREAKER) is None  # 2 before: it fits
    would = would_refuse(a, allowed(4), counted(a, 4), BREAKER)  # 3 before: the 4th
    assert would is not None and would.reason is RefusalReason.REPEATED_CALL
    assert (would.scope, would.used, would.limit, would.repeat_limit) == (Scope.SESSION, 3, 15, 3)
    assert shadow_message(would) == (
        "Shadow mode: the tool ran. The tool 'delete_tags' would NOT have run under "
        "enforcement: it was already called with the same arguments 3 times in this "
        "10-minute window, which ends at 12:10 UTC. Repeating it will not help: stop and "
        "tell the user."
    )
    assert would_refuse(a, allowed(4), counted(a, 4), None) is None  # no breaker: no repeat
    enforced = repeating(shadow=None)
    assert would_refuse(enforced, allowed(4), counted(enforced, 4), BREAKER) is None


def test_a_shadowed_repeat_is_told_before_the_limit() -> None:
    a = repeating()
    would = would_refuse(a, allowed(16), counted(a, 16), BREAKER)
    assert would is not None and would.reason is RefusalReason.REPEATED_CALL
