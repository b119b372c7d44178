"""Shadow mode: under `"enforce": false` (the whole policy, or one category) a call over a
limit runs, and its answer says which refusal an enforcing policy would have given.

The store counts such a category up to `SHADOW_CEILING` instead of its limit (and the loop
breaker's repeats likewise), so counting goes on past the limit with the same conditional
writes; the answer is then judged here against the policy's limits (and any raise or
grant), with the refusal's own words.
"""

from __future__ import annotations

from dataclasses import replace

from chalicelib.check.repeats import repeated
from chalicelib.check.shaping import refusal_of
from chalicelib.quota.answers import Allowed, Refused, refusal_sentence
from chalicelib.quota.core import Attempt, RefusalReason, SessionSnapshot
from chalicelib.quota.facts import RepeatsUnder, within
from chalicelib.quota.policy import MAX_LIMIT, RepeatLimit

SHADOW_CEILING = MAX_LIMIT  # what a shadowed category's store condition counts up to


def would_refuse(
    attempt: Attempt, allowed: Allowed, seen: SessionSnapshot, repeat: RepeatLimit | None
) -> Refused | None:
    """The refusal an enforcing policy would have given this counted call, judged at the
    session first (the loop breaker before the limit, as the session's rule explains a
    refusal), then at each wider scope; None if it fits everywhere. `seen` is the session
    as counting this call left it, `repeat` the category's loop breaker. A lease would
    have been cut to what remains, so it counts as refused only when nothing remained."""
    if attempt.shadow_limit is None or allowed.duplicate:
        return None
    need = attempt.weight
    used = allowed.used - attempt.units
    refusal = replace(
        refusal_of(attempt, RefusalReason.QUOTA_EXCEEDED, used, allowed.limit), units=need
    )
    key = attempt.repeat_key
    if key is not None and repeat is not None:
        # The breaker's own clause, on the count as it stood before this call was counted.
        earlier = replace(seen, repeats={**seen.repeats, key: seen.repeats.get(key, 0) - 1})
        if not RepeatsUnder(key, repeat.limit).holds(earlier):
            return repeated(refusal, attempt, repeat.limit)
    if not within(refusal.used, need, allowed.limit):
        return refusal
    for use in allowed.scopes:
        before = use.used - attempt.units
        if not within(before, need, use.limit):
            return replace(
                refusal,
                used=before,
                limit=use.limit,
                resets_at_ms=use.resets_at_ms,
                scope=use.scope,
                scopes=allowed.scopes,
            )
    return None


def shadow_message(would: Refused) -> str:
    """What the refusal would have said, as the answer's `shadow` says it: the tool ran."""
    return f"Shadow mode: the tool ran. {refusal_sentence(would.tool, would.why, ran=True)}"
