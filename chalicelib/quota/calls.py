"""A session's recent calls as the core keeps them: the record of one call, the form a
client's call id is kept in, and the folding of a runaway loop's refusals."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, replace

from chalicelib.clock import iso_utc

MAX_PLAIN_CALL_ID = 20


def call_id_key(call_id: str) -> str:
    """The form a call id is kept and compared in: short ids (JSON-RPC ids are usually
    small numbers) as they are, long ones as a 90-bit hash, to keep the session small."""
    if len(call_id) <= MAX_PLAIN_CALL_ID:
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8")).digest()
    return "~" + base64.urlsafe_b64encode(digest).decode("ascii")[:15]


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
        return out


def with_call(calls: tuple[CallRecord, ...], record: CallRecord) -> tuple[CallRecord, ...]:
    """The last calls with `record` added: a refusal that repeats the last one is folded
    into it ("delete_tag refused x385"), so a loop cannot push everything else out."""
    if calls and record.repeats_of(calls[-1]):
        folded = replace(record, repeats=calls[-1].repeats + record.repeats)
        return (*calls[:-1], folded)
    return (*calls, record)


def fold_repeats(calls: tuple[CallRecord, ...] | list[CallRecord]) -> tuple[CallRecord, ...]:
    """The last calls with every run of repeated refusals folded into one record."""
    out: tuple[CallRecord, ...] = ()
    for record in calls:
        out = with_call(out, record)
    return out
