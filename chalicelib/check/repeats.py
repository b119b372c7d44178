"""The loop breaker (issue 22): a session that calls one tool with the same arguments more
than a category's `repeat` limit allows in its window is refused (`repeated_call`).

The rule is the core's (`quota.rules.session_consume`, clause `RepeatsUnder`); this module
only says which calls it applies to, and shapes its refusal.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from chalicelib.quota.answers import Refused
from chalicelib.quota.core import Attempt, RefusalReason, repeat_key, repeat_window_end

if TYPE_CHECKING:
    from chalicelib.quota.policy import Category


def with_repeat(attempt: Attempt, category: Category, args_digest: str | None) -> Attempt:
    """The attempt with its loop breaker's key and limit, if the category sets `repeat`
    and the client sent the arguments' digest; not for a lease (reads only, several calls
    at once). In shadow mode the store counts repeats up to the ceiling it counts calls
    to (`base_limit`), so it refuses none; `shadow.would_refuse` judges the count."""
    repeat = category.repeat
    if repeat is None or args_digest is None or attempt.leased:
        return attempt
    window_ms = repeat.window_seconds * 1000
    return replace(
        attempt,
        repeat_key=repeat_key(attempt.tool, args_digest, window_ms, attempt.now_ms),
        repeat_limit=repeat.limit if attempt.shadow_limit is None else attempt.base_limit,
        repeat_window_ms=window_ms,
    )


def repeated(refusal: Refused, attempt: Attempt, limit: int | None = None) -> Refused:
    """A session refusal as the loop breaker's: its code, its message, and a Retry-After
    at the end of the window (waiting there is the only thing that changes the answer).
    `limit`: the breaker's limit when the attempt's is not it (shadow mode's ceiling)."""
    assert attempt.repeat_key is not None
    return replace(
        refusal,
        reason=RefusalReason.REPEATED_CALL,
        first_exhaustion=False,
        resets_at_ms=repeat_window_end(attempt.repeat_key),
        repeat_limit=attempt.repeat_limit if limit is None else limit,
        repeat_window_ms=attempt.repeat_window_ms,
    )
