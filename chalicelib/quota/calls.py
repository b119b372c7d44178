"""A session's recent calls as the core keeps them: the record of one call, the form a
client's call id is kept in, and the folding of a runaway loop's refusals."""

from __future__ import annotations

import base64
import enum
import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from chalicelib.clock import iso_utc

MAX_PLAIN_CALL_ID = 20
HASHED = "~"  # what begins a hashed id, and so what no id kept verbatim may begin with


def call_id_key(call_id: str) -> str:
    """The form a call id is kept and compared in: short ids (JSON-RPC ids are usually
    small numbers) as they are, long ones as a 90-bit hash, to keep the session small.
    An id that begins as a hashed one does is hashed too, so no id sent verbatim can
    spell another id's hash: two ids share a kept form only if they are the same id."""
    if len(call_id) <= MAX_PLAIN_CALL_ID and not call_id.startswith(HASHED):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8")).digest()
    return HASHED + base64.urlsafe_b64encode(digest).decode("ascii")[:15]


def call_binding(
    tool: str, category: str, units: int, args_digest: str | None, principal: str | None
) -> str:
    """What a call id binds, as one short digest: the tool, its category, the calls asked
    at once, the arguments' digest (when sent) and the principal. The same id with any of
    these different is another call, never a retry."""
    parts = (tool, category, str(units), args_digest or "", principal or "")
    text = "\x1f".join(parts).encode("utf-8")
    return hashlib.sha256(text).hexdigest()[:16]


class CallState(enum.StrEnum):
    """Where a call counted under a client's call id stands in its life."""

    # Counted in its session, not yet at every wider scope: a copy is never allowed.
    IN_PROGRESS = "in_progress"
    ADMITTED = "admitted"  # counted at every scope: a copy is a duplicate, a few times


@dataclass(frozen=True)
class CallLife:
    """One call id's life in its session: which check counted it, what it binds, whether
    it was admitted at every scope, and how many duplicates were answered from it. A
    write conditioned on the exact life it read (`facts.CallLifeIs`) moves it on, so no
    two copies take the same step."""

    state: CallState
    check_id: str  # the service's id of the check that counted it
    binding: str  # `call_binding` of the call
    until_ms: int  # in progress: by then the check that counted it has surely ended
    replays: int = 0  # duplicates answered from it

    def admitted(self) -> CallLife:
        """This life once its check admitted it: what its admission writes, and what the
        store's own retry of that write finds."""
        return replace(self, state=CallState.ADMITTED)


def life_gone(life: CallLife | None, now_ms: int) -> bool:
    """Whether a life whose call left the session's last calls may be dropped with it:
    never while it is in progress and its check may still be running (until `until_ms`),
    since that check's admission must find it."""
    return life is None or life.state is not CallState.IN_PROGRESS or life.until_ms <= now_ms


def gone_lives(
    lives: Mapping[str, CallLife | None], held: Collection[str], now_ms: int
) -> tuple[str, ...]:
    """The kept call ids whose lives a counted call's write drops (`Change.tidy_at`): no
    counted call in the last calls holds them (`held`), and they may go (`life_gone`)."""
    return tuple(
        sorted(key for key, life in lives.items() if key not in held and life_gone(life, now_ms))
    )


@dataclass(frozen=True)
class CallRecord:
    """One recent call of a session, as kept in the session's last-calls record.

    `call_id` is the client's id in its kept form; `check_id` is the service's own id of
    the check that wrote the record, which makes the store's retries idempotent.
    """

    at_ms: int
    category: str
    tool: str
    allowed: bool
    principal: str | None = None
    call_id: str | None = None
    replay: bool = False
    check_id: str | None = None
    repeats: int = 1  # refusals of the same tool in a row, kept as one record
    units: int = 1  # the calls asked for at once (a lease's size): part of what an id binds
    held: int = 0  # of `repeats`, the refusals the MCP side held (vouched for)
    transport_session: str | None = None  # the legacy Mcp-Session-Id it came over (shown)

    def repeats_of(self, earlier: CallRecord) -> bool:
        """Whether this refused call repeats `earlier`: a runaway loop's next attempt at
        the same refused tool, which the record keeps as one line with a count."""
        return (
            not self.allowed
            and not earlier.allowed
            and not self.replay
            and not earlier.replay
            and (self.tool, self.category) == (earlier.tool, earlier.category)
        )

    def folded_onto(self, earlier: CallRecord) -> CallRecord:
        """This refusal kept as one record with the `earlier` one it repeats."""
        return replace(self, repeats=earlier.repeats + self.repeats, held=earlier.held + self.held)

    def to_json(self) -> dict[str, object]:
        """The record as the API shows it."""
        out: dict[str, object] = {
            "at": iso_utc(self.at_ms),
            "tool": self.tool,
            "category": self.category,
            "allowed": self.allowed,
        }
        if self.call_id is not None:
            out["call_id"] = self.call_id
        if self.principal is not None:
            out["principal"] = self.principal
        if self.replay:
            out["replay"] = True
        if self.repeats > 1:
            out["repeats"] = self.repeats
        if self.held:
            out["held"] = self.held
        if self.transport_session is not None:
            out["transport_session_id"] = self.transport_session
        return out


def with_call(calls: tuple[CallRecord, ...], record: CallRecord) -> tuple[CallRecord, ...]:
    """The last calls with `record` added: a refusal that repeats the last one is folded
    into it ("delete_tag refused x385"), so a loop cannot push everything else out."""
    if calls and record.repeats_of(calls[-1]):
        folded = record.folded_onto(calls[-1])
        return (*calls[:-1], folded)
    return (*calls, record)


def fold_repeats(calls: tuple[CallRecord, ...] | list[CallRecord]) -> tuple[CallRecord, ...]:
    """The last calls with every run of repeated refusals folded into one record."""
    out: tuple[CallRecord, ...] = ()
    for record in calls:
        out = with_call(out, record)
    return out


def without_counted(calls: list[CallRecord], refused: CallRecord) -> list[CallRecord]:
    """The last calls without the counted record of the call `refused` shows taken back
    (the latest, by call id or else by check): the refusal takes its place."""
    for i in range(len(calls) - 1, -1, -1):
        kept = calls[i]
        same = (
            kept.call_id == refused.call_id
            if refused.call_id is not None
            else kept.check_id == refused.check_id
        )
        if same and kept.allowed and not kept.replay:
            return calls[:i] + calls[i + 1 :]
    return calls
