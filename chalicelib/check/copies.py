"""A check whose call id names a call its session already admitted, answered as any copy
is (a duplicate, nothing counted) before anything else is asked of it: a retry of an
approved call that ran gets its kept result, not a new approval."""

from __future__ import annotations

from collections.abc import Callable

from chalicelib.check import deadline
from chalicelib.check.verdicts import call_id_fault
from chalicelib.quota.answers import Allowed
from chalicelib.quota.approvals import answered_as_copy
from chalicelib.quota.core import Attempt, SessionSnapshot, Verdict
from chalicelib.quota.rules import explain_refusal
from chalicelib.storage.ports import RecordChanged, SessionChecks

# Each retry of a check's session step follows a change made by another writer (an idle
# reset race, an admin's reset, copies of one freed call id taking it in turn); more
# means a misbehaving store. The check's own steps use it too.
MAX_ROUNDS = 8


def answer_copy(
    attempt: Attempt,
    store: SessionChecks,
    kept_answers: Callable[[Attempt], bool],
    answered: Callable[[Attempt, SessionSnapshot], Allowed],
    admitted_here: Callable[[Attempt], bool] = lambda attempt: False,
) -> Allowed | None:
    """The answer to a check whose call id names a call its session already admitted
    (`approvals.answered_as_copy`), as to any copy: a duplicate, with nothing counted
    (`answered` shapes it). None when it is no such copy: nothing was written, and the
    check goes on to its approval. Read first, never a count: a call that needs an
    approval is counted only on one. `admitted_here` waits for the call's admission if
    this container is making it (`CheckService._admitted_here`).

    Raises:
        CallIdConflict: the id names another call, or is used up with no result kept.
        CallInProgress: the call is still being counted by another check.
        StorageError: the store failed.
    """
    if attempt.call_id is None:
        return None
    for _ in range(MAX_ROUNDS):
        deadline.ensure("reading a call's session")
        snapshot = store.get(attempt.session)
        if snapshot is None:
            return None
        verdict = explain_refusal(snapshot, attempt)
        if not answered_as_copy(verdict):
            return None
        if verdict is Verdict.IN_PROGRESS and admitted_here(attempt):
            continue  # admitted after its answer, here: read again
        # As `_count_session` answers these verdicts, without its count before them.
        kept = verdict is Verdict.CALL_ID_USED and kept_answers(attempt)
        fault = call_id_fault(attempt, snapshot, verdict)
        if fault is not None and not kept:
            raise fault
        if kept or store.record_replay(attempt, snapshot):
            return answered(attempt, snapshot)
    raise RecordChanged("answering a copy of a call")
