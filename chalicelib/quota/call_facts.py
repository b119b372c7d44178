"""The facts about a call counted under a client's call id: whether the id is free, and
if not why (`CallIdFree`), and the life a write that moves the call on holds on. Part of
`quota.facts`, which names them with every other fact."""

from __future__ import annotations

from dataclasses import dataclass

from chalicelib.quota.calls import life_gone
from chalicelib.quota.core import (
    CallLife,
    CallRecord,
    CallState,
    SessionSnapshot,
    Verdict,
    call_id_key,
)


@dataclass(frozen=True)
class CallIdFree:
    """No call (other than a replay) in the session's record carries this client call
    id. When it fails, the record says why: this very check counted it (the store's own
    retry of a write that went through), the id names another call (a conflict), the call
    is still being counted at the wider scopes (in progress), a retry to answer from its
    admitted original, or an id reused too late or too often."""

    call_id: str
    check_id: str
    binding: str
    tool: str
    category: str
    units: int
    now_ms: int

    def holds(self, record: SessionSnapshot | None) -> bool:
        # The id has no life either: a call still in progress may have left the last
        # calls, and a copy of it must not be counted (a gone life is freed by `why`).
        return record is None or (
            not record.holds_call_id(self.call_id) and call_id_key(self.call_id) not in record.lives
        )

    def why(self, record: SessionSnapshot) -> Verdict:
        """Our own write, a conflict, a call in progress, a duplicate, a used-up or a
        reused id."""
        life = record.lives.get(call_id_key(self.call_id))
        if life is not None and life.check_id == self.check_id:
            return Verdict.ALREADY_COUNTED
        if not record.binds(self.call_id, self.binding, self.tool, self.category, self.units):
            return Verdict.CALL_ID_CONFLICT
        if life is not None and not life_gone(life, self.now_ms):
            # In progress, its record gone from the last calls: its id still binds it.
            return (
                Verdict.IN_PROGRESS if life.binding == self.binding else (Verdict.CALL_ID_CONFLICT)
            )
        if record.find_call(self.call_id) is None:
            return Verdict.REUSED_CALL_ID  # counted before a reset: a new call now
        if record.in_progress(self.call_id, self.now_ms):
            return Verdict.IN_PROGRESS
        if record.replayable(self.call_id, self.now_ms):
            return Verdict.DUPLICATE
        life = record.life_of(self.call_id)
        if life is not None and life.state is CallState.IN_PROGRESS:
            return Verdict.REUSED_CALL_ID  # its check ended without admitting it
        return Verdict.CALL_ID_USED


@dataclass(frozen=True)
class CallCountedBy:
    """The call id's life names this check as the one that counted it (in any state): a
    take-back of it that went through has ended that life, so the store's own retry of
    the take-back fails this."""

    key: str  # the call id in its kept form (`call_id_key`)
    check_id: str

    def holds(self, record: SessionSnapshot | None) -> bool:
        life = None if record is None else record.lives.get(self.key)
        return life is not None and life.check_id == self.check_id


@dataclass(frozen=True)
class TakenBack:
    """The session's record shows this check's call taken back (refused after it was
    counted): a take-back that went through, which its retry must not repeat."""

    record: CallRecord  # the call as refused (`Attempt.record(allowed=False)`)

    def holds(self, record: SessionSnapshot | None) -> bool:
        own = self.record
        return record is not None and any(
            c.check_id == own.check_id and not c.allowed and not c.replay for c in record.calls
        )


@dataclass(frozen=True)
class CallLifeIs:
    """The call id's life is exactly `life` (None: it has none): a write that moves a
    call on (admitted, replayed) holds only on the life it read."""

    key: str  # the call id in its kept form (`call_id_key`)
    life: CallLife | None

    def holds(self, record: SessionSnapshot | None) -> bool:
        return (None if record is None else record.lives.get(self.key)) == self.life
