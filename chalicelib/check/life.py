"""A call's life past its session's count: admitted once every wider budget counted it,
so that only then is a copy of it answered as its duplicate."""

from __future__ import annotations

from chalicelib.observability import count, logger
from chalicelib.quota.core import Attempt, CallState, SessionSnapshot, call_id_key
from chalicelib.storage.ports import SessionChecks, StorageError


def admit(store: SessionChecks, attempt: Attempt, snapshot: SessionSnapshot) -> None:
    """The call is counted at every scope: its call id's life (as `snapshot`, the
    session its count left, holds it) moves from in progress to admitted. Never raises:
    the answer is given. If the write fails, the life stays in progress until
    `IN_PROGRESS_MS`, and a copy then counts the call anew (under-admission, never over).
    """
    life = snapshot.lives.get(call_id_key(attempt.call_id)) if attempt.call_id else None
    if life is None or life.check_id != attempt.check_id:
        return
    if life.state is not CallState.IN_PROGRESS:
        return
    try:
        admitted = store.admit(attempt, life)
    except StorageError as exc:
        admitted = False
        logger.warning(
            "a counted call stays in progress: its copies count anew once it lapses",
            extra={"session_id": attempt.session_id, "error": exc.doing},
        )
    if not admitted:
        count("AdmitFailed", attempt.category)
