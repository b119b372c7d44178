"""Exactly-once writes around the check: keep an allowed call's result under its call id
(only a call this session allowed and admitted, for that tool), and answer a duplicate
of it in a replaying category with that result."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from chalicelib.auth.roles import Role
from chalicelib.auth.tokens import Identity, effective_principal
from chalicelib.check.afterwards import Afterwards
from chalicelib.check.life import copies_key
from chalicelib.check.requests import (
    MAX_SESSION_ID,
    TOOL_NAME,
    VISIBLE_ASCII,
    reject_unknown,
    text_field,
)
from chalicelib.clock import Clock
from chalicelib.errors import CallNotAllowed, Forbidden, InvalidRequest, ResultConflict
from chalicelib.quota.core import Attempt, CallRecord, CallState, SessionKey, SessionSnapshot
from chalicelib.quota.policy import Policy
from chalicelib.quota.results import (
    CallResult,
    CallResults,
    Replay,
    ResultKey,
    StoreOutcome,
    answers_past_duplicates,
    keep_ms,
    kept,
    outcome,
    replay_of,
)
from chalicelib.storage.ports import SessionReads

# A result body may hold more than a check's 16 KiB: past MAX_KEPT_BYTES only its digest
# is kept, so the MCP side can always send the whole result and let the service cut it.
MAX_RESULT_BODY_BYTES = 1024 * 1024
RESULT_FIELDS = frozenset({"session_id", "tool", "result"})


@dataclass(frozen=True)
class ResultToStore:
    """A validated `PUT /v1/results/{call_id}` body."""

    session_id: str
    call_id: str
    tool: str
    result: dict[str, Any]


def call_id_param(call_id: str) -> str:
    """The path's call id, validated.

    Raises:
        InvalidRequest: not 1 to 128 visible ASCII characters.
    """
    if not 1 <= len(call_id) <= 128 or not VISIBLE_ASCII.fullmatch(call_id):
        raise InvalidRequest("The call id must be 1 to 128 visible ASCII characters.", "call_id")
    return call_id


def session_param(params: dict[str, str]) -> str:
    """`GET /v1/results/{call_id}`'s `session_id` query parameter, validated.

    Raises:
        InvalidRequest: missing or malformed.
    """
    session_id = text_field(params, "session_id", MAX_SESSION_ID)
    assert session_id is not None  # required=True guarantees it
    return session_id


def parse_result(call_id: str, body: dict[str, Any]) -> ResultToStore:
    """Validate a `PUT /v1/results/{call_id}` request.

    Raises:
        InvalidRequest: a field is missing, malformed or unknown.
    """
    reject_unknown(body, RESULT_FIELDS)
    call_id = call_id_param(call_id)
    session_id = text_field(body, "session_id", MAX_SESSION_ID)
    tool = text_field(body, "tool", 128, TOOL_NAME, rule="letters, digits and _ . : / -")
    result = body.get("result")
    if not isinstance(result, dict):
        raise InvalidRequest("result must be the tool's CallToolResult, a JSON object.", "result")
    assert session_id is not None and tool is not None  # required=True guarantees it
    return ResultToStore(session_id, call_id, tool, result)


# Pauses before reading a call in progress again when its result comes: its admission
# lands one store round trip after its check's answer, from whichever container made it.
ADMISSION_PAUSES_S = (0.02, 0.05, 0.1, 0.2)


class ResultDesk:
    """Keeps results of allowed calls and reads them back for duplicates."""

    def __init__(
        self,
        policy: Policy,
        sessions: SessionReads,
        results: CallResults,
        clock: Clock,
        idle_timeout_seconds: int,
        after: Afterwards | None = None,
    ) -> None:
        self._after = after or Afterwards()  # the checks' admissions in this container
        self._policy = policy
        self._sessions = sessions
        self._results = results
        self._clock = clock
        self._keep_ms = keep_ms(idle_timeout_seconds * 1000)

    def store(self, identity: Identity, put: ResultToStore) -> tuple[StoreOutcome, CallResult]:
        """Keep the result of a call this session allowed and admitted for `put.tool`
        under the token's tenant and principals; the first store wins.

        Raises:
            Forbidden: not an MCP server's token (an administrator keeps no results).
            CallNotAllowed: no such admitted call for this tool (or another principal's).
            PrincipalNotAllowed: the call's principal is not one the token may act for.
            ResultConflict: another result was kept first.
            StorageError: a store failed.
        """
        record = self._allowed_call(identity, put.session_id, put.call_id, "keeps")
        if record.tool != put.tool:
            raise CallNotAllowed(f"Call id {put.call_id!r} was allowed for another tool.")
        key = ResultKey(identity.tenant, put.session_id, put.call_id)
        mine = kept(key, put.tool, put.result, self._clock(), self._keep_ms)
        done = outcome(mine, self._results.put_first(mine))
        if done is StoreOutcome.CONFLICT:
            raise ResultConflict(
                f"Another result is already kept for call id {put.call_id!r}; it stays."
            )
        return done, mine

    def read(self, identity: Identity, session_id: str, call_id: str) -> Replay:
        """What a copy of this call would be answered with now (`replay`), for the MCP side
        waiting for the result of a call still running: a read, where asking the check
        again would use up the call's duplicates.

        Raises:
            Forbidden, CallNotAllowed, PrincipalNotAllowed: as `store`.
            StorageError: a store failed.
        """
        self._allowed_call(identity, session_id, call_id, "reads")
        return self.replay(identity.tenant, session_id, call_id)

    def _allowed_call(
        self, identity: Identity, session_id: str, call_id: str, doing: str
    ) -> CallRecord:
        """The session's record of a call it allowed and admitted, whose principal the
        token may act for.

        Raises:
            Forbidden: not an MCP server's token.
            CallNotAllowed: no such admitted call in the session.
            PrincipalNotAllowed: the call's principal is not one the token may act for.
            StorageError: a store failed.
        """
        if identity.role != Role.SERVER:
            raise Forbidden(f"Only an MCP server's token {doing} call results.")
        snapshot = self._admitted(SessionKey(identity.tenant, session_id), call_id)
        record = None if snapshot is None else snapshot.find_call(call_id)
        life = None if snapshot is None else snapshot.life_of(call_id)
        if record is None or life is None or life.state is not CallState.ADMITTED:
            raise CallNotAllowed(
                f"No call with id {call_id!r} was allowed and counted in session "
                f"{session_id!r}: keep or read a result only after its check was allowed."
            )
        effective_principal(identity, record.principal)
        return record

    def _admitted(self, session: SessionKey, call_id: str) -> SessionSnapshot | None:
        """The session, read once the call's admission has landed if it is on its way:
        made after the check's answer (`check.afterwards`), a result may come first.
        Waits for it here, or reads again after a pause, while the call is in progress.

        Raises:
            StorageError: the store failed.
        """
        for pause in ADMISSION_PAUSES_S:
            snapshot = self._sessions.get(session)
            if snapshot is None or not snapshot.in_progress(call_id, self._clock()):
                return snapshot
            if not self._after.wait_for(copies_key(session, call_id), pause):
                time.sleep(pause)
        return self._sessions.get(session)

    def replays(self, category: str) -> bool:
        """Whether a duplicate in this category is answered with the stored result."""
        found = self._policy.categories.get(category)
        return found is not None and found.replay

    def answers_copy(self, attempt: Attempt) -> bool:
        """Whether a copy of an admitted call past its duplicates is answered with the
        call's kept result (`answers_past_duplicates`); only such a copy reads the store.

        Raises:
            StorageError: the store failed.
        """
        call_id = attempt.call_id
        replaying = call_id is not None and self.replays(attempt.category)
        key = ResultKey(attempt.tenant, attempt.session_id, call_id or "")
        stored = self._results.get(key) if replaying else None
        return answers_past_duplicates(replaying, stored, self._clock())

    def replay(self, tenant: str, session_id: str, call_id: str) -> Replay:
        """What a duplicate of this call is answered with.

        Raises:
            StorageError: the store failed.
        """
        stored = self._results.get(ResultKey(tenant, session_id, call_id))
        return replay_of(stored, self._clock())
