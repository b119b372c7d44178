"""What a verdict of the store's condition that is no answer yet turns into: a 409 for
a call id reused for another call, or the attempt to make next."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from chalicelib.errors import CallIdConflict, CallInProgress, Conflict
from chalicelib.quota.core import (
    MAX_REPLAYS,
    REPLAY_WINDOW_MS,
    Attempt,
    SessionSnapshot,
    Verdict,
    call_id_key,
)
from chalicelib.quota.rules import partial_units


def conflict(attempt: Attempt, snapshot: SessionSnapshot) -> CallIdConflict:
    original = snapshot.find_call(attempt.call_id or "")
    was = f" for the tool '{original.tool}' ({original.category})" if original else ""
    return CallIdConflict(
        f"The tool '{attempt.tool}' was NOT run: call id {attempt.call_id!r} was already "
        f"counted in session '{attempt.session_id}'{was}. A call id names one call (its "
        "tool, arguments and principal); a retry must repeat that call exactly, and a new "
        "call needs a new id."
    )


def used_up(attempt: Attempt) -> CallIdConflict:
    return CallIdConflict(
        f"The tool '{attempt.tool}' was NOT run: call id {attempt.call_id!r} already ran in "
        f"session '{attempt.session_id}' and its retries were answered (at most "
        f"{MAX_REPLAYS}, within {REPLAY_WINDOW_MS // 1000} s of it). If this is another "
        "retry of that call, it ran once (or is still running): do not send it again under "
        "a new id, which would run it twice; read the current state instead. A call id "
        "names one call; a new call needs a new id."
    )


def in_progress(attempt: Attempt) -> CallInProgress:
    return CallInProgress(
        f"The tool '{attempt.tool}' was NOT run yet: call id {attempt.call_id!r} is being "
        f"counted by another request in session '{attempt.session_id}' that has not been "
        "answered. Send the same call again after Retry-After: it is then answered as that "
        "call's duplicate if it was allowed, or counted anew if it was refused."
    )


def call_id_fault(attempt: Attempt, snapshot: SessionSnapshot, verdict: Verdict) -> Conflict | None:
    """The 409 a verdict about the call id answers (another call's id, a call still in
    progress), or None."""
    if verdict is Verdict.CALL_ID_CONFLICT:
        return conflict(attempt, snapshot)
    if verdict is Verdict.IN_PROGRESS:
        return in_progress(attempt)
    if verdict is Verdict.CALL_ID_USED:
        return used_up(attempt)
    return None


def copy_of_used_id(
    attempt: Attempt,
    snapshot: SessionSnapshot,
    verdict: Verdict,
    kept_answers: Callable[[Attempt], bool],
    admitted_here: Callable[[Attempt], bool],
) -> bool | None:
    """For a verdict about the call id: whether the call is a copy past its duplicates
    answered from its kept result (`kept_answers`: no write); None to ask the store again
    (`admitted_here`: the call was being admitted here, after its answer).

    Raises:
        Conflict: the 409 the verdict answers (`call_id_fault`).
    """
    if verdict is Verdict.IN_PROGRESS and admitted_here(attempt):
        return None
    fault = call_id_fault(attempt, snapshot, verdict)
    kept = verdict is Verdict.CALL_ID_USED and kept_answers(attempt)
    if fault is not None and not kept:
        raise fault
    return kept


def try_again_as(attempt: Attempt, snapshot: SessionSnapshot, verdict: Verdict) -> Attempt | None:
    """The attempt to make next for a verdict that is no answer yet, or None."""
    if verdict is Verdict.REUSED_CALL_ID and attempt.call_id is not None:
        life = snapshot.lives.get(call_id_key(attempt.call_id))
        return replace(attempt, dedupe=False, freed_life=life)
    if verdict is Verdict.CALL_ID_TAKEN:
        return replace(attempt, dedupe=True, freed_life=None)
    if verdict is Verdict.STALE:
        return attempt
    if verdict is Verdict.CLOCK_BEHIND:
        return replace(attempt, now_ms=snapshot.started_ms, clock_ms=attempt.real_ms)
    if verdict is Verdict.OVER_LIMIT and partial_units(snapshot, attempt) > 0:
        # The end of a budget: a lease gets the calls that remain, in one more write.
        return replace(attempt, units=partial_units(snapshot, attempt))
    return None
