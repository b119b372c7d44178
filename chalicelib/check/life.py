"""A call's life past its session's count: admitted once every wider budget counted it,
so that only then is a copy of it answered as its duplicate."""

from __future__ import annotations

from chalicelib.quota.core import Attempt, CallState, SessionSnapshot, call_id_key
from chalicelib.storage.ports import RecordChanged, SessionChecks


def admit(store: SessionChecks, attempt: Attempt, snapshot: SessionSnapshot) -> None:
    """The call is counted at every scope: its call id's life (as `snapshot`, the
    session its count left, holds it) moves from in progress to admitted. The last write
    of an allowed check: once it is done, a copy may be answered as a duplicate.

    Raises:
        RecordChanged: the life is no longer the one this check started.
        StorageError: the store failed.
    """
    life = snapshot.lives.get(call_id_key(attempt.call_id)) if attempt.call_id else None
    if life is None or life.check_id != attempt.check_id:
        return
    if life.state is CallState.IN_PROGRESS and not store.admit(attempt, life):
        raise RecordChanged("admitting a counted call")
