"""A call's life past its session's count: admitted once every wider budget counted it,
so that only then is a copy of it answered as its duplicate."""

from __future__ import annotations

from functools import partial

from chalicelib.check import deadline
from chalicelib.check.afterwards import Afterwards
from chalicelib.check.steps import retried
from chalicelib.quota.core import (
    Attempt,
    CallLife,
    CallState,
    SessionKey,
    SessionSnapshot,
    call_id_key,
)
from chalicelib.storage.ports import RecordChanged, SessionChecks


def _started(attempt: Attempt, snapshot: SessionSnapshot) -> CallLife | None:
    """The life of the call this check started, as `snapshot` holds it, or None."""
    life = snapshot.lives.get(call_id_key(attempt.call_id)) if attempt.call_id else None
    return life if life is not None and life.check_id == attempt.check_id else None


def admits(attempt: Attempt, snapshot: SessionSnapshot) -> bool:
    """Whether the call, counted at every scope, still has its admission to come: its
    call id's life (as `snapshot`, the session its count left, holds it) is in progress."""
    life = _started(attempt, snapshot)
    return life is not None and life.state is CallState.IN_PROGRESS


def admit(store: SessionChecks, attempt: Attempt, snapshot: SessionSnapshot) -> None:
    """The call is counted at every scope: its call id's life moves from in progress to
    admitted (`admits`). Made after the answer (`check.afterwards`): once it is done, a
    copy may be answered as a duplicate.

    Raises:
        RecordChanged: the life is no longer the one this check started.
        StorageError: the store failed.
    """
    life = _started(attempt, snapshot)
    if life is not None and life.state is CallState.IN_PROGRESS and not store.admit(attempt, life):
        raise RecordChanged("admitting a counted call")


class Admissions:
    """A service's admissions, made after the answers (`check.afterwards`)."""

    def __init__(self, store: SessionChecks, afterwards: Afterwards) -> None:
        self._store = store
        self._after = afterwards

    def after_answer(self, attempt: Attempt, snapshot: SessionSnapshot) -> None:
        """Admit the call, counted at every scope, once the check has answered (as
        `snapshot`, the session its count left, holds its life)."""
        if admits(attempt, snapshot):
            admission = partial(retried, partial(admit, self._store, attempt, snapshot))
            self._after.later(_copies_of(attempt), admission, "admitting a counted call")

    def made_here(self, attempt: Attempt) -> bool:
        """Whether this container was admitting the call after its answer (a copy sent
        right after it): then it waited for that (while the check's deadline allows),
        and the copy asks the store again."""
        return self._after.wait_for(_copies_of(attempt), deadline.left_s())


def _copies_of(attempt: Attempt) -> tuple[SessionKey, str | None]:
    return copies_key(attempt.session, attempt.call_id)


def copies_key(session: SessionKey, call_id: str | None) -> tuple[SessionKey, str | None]:
    """What a call's copies (and its result) share: its session and call id; the key of
    its admission after the answer (`Afterwards.wait_for`)."""
    return session, call_id
