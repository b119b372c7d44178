"""The pure quota decision: no I/O, no wall clock; times are epoch milliseconds passed in.

The store applies one conditional update per check. When DynamoDB refuses it, the old
item comes back and `explain_refusal` says why, with the same rules the condition uses.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from chalicelib.clock import iso_utc

QUOTA_EXCEEDED = "quota_exceeded"
SESSION_SUSPENDED = "session_suspended"
_FIELD_SEP = "|"
_DIGITS36 = "0123456789abcdefghijklmnopqrstuvwxyz"
MAX_PLAIN_CALL_ID = 20
# A retry of a timed-out check comes within seconds, a few times at most. A call id
# reused later or more often is a new call: a loop cannot run uncounted on one id.
REPLAY_WINDOW_MS = 60_000
MAX_REPLAYS = 3


def _base36(value: int) -> str:
    out = ""
    while True:
        value, digit = divmod(value, 36)
        out = _DIGITS36[digit] + out
        if value == 0:
            return out


def call_id_key(call_id: str) -> str:
    """The form a call id is stored and compared in: short ids (JSON-RPC ids are usually
    small numbers) as they are, long ones as a 90-bit hash, to keep the item near 1 KB."""
    if len(call_id) <= MAX_PLAIN_CALL_ID:
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8")).digest()
    return "~" + base64.urlsafe_b64encode(digest).decode("ascii")[:15]


@dataclass(frozen=True)
class CallRecord:
    """One recent call of a session, as kept in the session's last-calls record."""

    at_ms: int
    category: str
    tool: str
    allowed: bool
    principal: str | None = None
    call_id: str | None = None
    replay: bool = False

    def encode(self) -> str:
        """Compact form stored in the counter item, about 30 bytes: the time in base 36,
        category, tool, allowed. The call id is kept beside it; the principal is the
        session's, stored once."""
        allowed = "1" if self.allowed else "0"
        return _FIELD_SEP.join((_base36(self.at_ms), self.category, self.tool, allowed))

    @classmethod
    def decode(
        cls, text: str, call_id: str | None, replay: bool = False, principal: str | None = None
    ) -> CallRecord:
        """Rebuild a record from its stored form."""
        at, category, tool, allowed = text.split(_FIELD_SEP, 3)
        return cls(int(at, 36), category, tool, allowed == "1", principal, call_id, replay)

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
        return out


@dataclass(frozen=True)
class SessionSnapshot:
    """A session's counter item as stored, decoded."""

    last_seen_ms: int
    started_ms: int
    counts: Mapping[str, int] = field(default_factory=dict)
    raised: Mapping[str, int] = field(default_factory=dict)
    refused: Mapping[str, int] = field(default_factory=dict)
    suspended: bool = False
    suspended_reason: str | None = None
    principal: str | None = None
    calls: tuple[CallRecord, ...] = ()

    def is_idle(self, now_ms: int, idle_ms: int) -> bool:
        """Whether the counters have expired: no attempt for longer than the idle timeout."""
        return self.last_seen_ms < now_ms - idle_ms

    def limit_for(self, category: str, base_limit: int) -> int:
        """The effective limit: the base (policy or grant) or a per-session raise, if higher."""
        return max(base_limit, self.raised.get(category, 0))

    def find_call(self, call_id: str) -> CallRecord | None:
        """The allowed (counted) call recorded under this call id, if still in the record."""
        key = call_id_key(call_id)
        for record in reversed(self.calls):
            if record.call_id == key and record.allowed and not record.replay:
                return record
        return None

    def replayable(self, call_id: str, now_ms: int) -> bool:
        """Whether a call with this id is a retry to answer from its original: the id was
        counted exactly once, recently, and has been replayed fewer than MAX_REPLAYS times,
        and was never refused. A loop that reuses one id fails this after a few calls, for
        as long as its entries are in the record."""
        key = call_id_key(call_id)
        seen = [r for r in self.calls if r.call_id == key]
        counted = [r for r in seen if r.allowed and not r.replay]
        if len(counted) != 1 or any(not r.allowed for r in seen):
            return False
        replays = len(seen) - 1
        return replays < MAX_REPLAYS and now_ms - counted[0].at_ms <= REPLAY_WINDOW_MS


@dataclass(frozen=True)
class Attempt:
    """One check: everything the store needs to count it, resolved before any I/O."""

    tenant: str
    session_id: str
    tool: str
    category: str
    base_limit: int
    now_ms: int
    idle_ms: int
    all_categories: tuple[str, ...]
    principal: str | None = None
    call_id: str | None = None
    dedupe: bool = True  # False once a reused call id has had its replays: count it anew

    @property
    def cutoff_ms(self) -> int:
        """Sessions last seen before this instant are idle-expired."""
        return self.now_ms - self.idle_ms

    @property
    def resets_at_ms(self) -> int:
        """When the counters reset if the session makes no further attempt."""
        return self.now_ms + self.idle_ms

    @property
    def ttl_epoch_seconds(self) -> int:
        """DynamoDB TTL value: clean-up only, never relied on for correctness."""
        return self.resets_at_ms // 1000 + 1

    @property
    def key(self) -> str:
        """The counter item's partition key: tenant first, from the token, never the body."""
        return f"{self.tenant}#{self.session_id}"

    def record(self, allowed: bool) -> CallRecord:
        """The last-calls entry for this attempt."""
        call_id = None if self.call_id is None else call_id_key(self.call_id)
        return CallRecord(self.now_ms, self.category, self.tool, allowed, self.principal, call_id)


class Refusal(enum.Enum):
    """Why the conditional update was refused, read from the old item."""

    EXPIRED = "expired"
    SUSPENDED = "suspended"
    DUPLICATE = "duplicate"  # a retry: answer with the original decision
    REUSED_CALL_ID = "reused_call_id"  # seen, but too late or too often to be a retry
    OVER_LIMIT = "over_limit"
    STALE = "stale"  # the item read back no longer fails the condition: try again


def explain_refusal(snapshot: SessionSnapshot, attempt: Attempt) -> Refusal:
    """Mirror of the store's condition: which clause failed for this old item."""
    if snapshot.suspended:
        return Refusal.SUSPENDED
    if snapshot.is_idle(attempt.now_ms, attempt.idle_ms):
        return Refusal.EXPIRED
    seen = attempt.call_id is not None and attempt.dedupe
    if seen and attempt.call_id is not None and snapshot.find_call(attempt.call_id):
        if snapshot.replayable(attempt.call_id, attempt.now_ms):
            return Refusal.DUPLICATE
        return Refusal.REUSED_CALL_ID
    used = snapshot.counts.get(attempt.category, 0)
    if used >= snapshot.limit_for(attempt.category, attempt.base_limit):
        return Refusal.OVER_LIMIT
    return Refusal.STALE


@dataclass(frozen=True)
class Decision:
    """The answer to one check: allowed, or blocked with the reason and the evidence."""

    allowed: bool
    session_id: str
    tool: str
    category: str
    used: int
    limit: int
    now_ms: int
    resets_at_ms: int
    reason: str | None = None
    duplicate: bool = False
    first_exhaustion: bool = False
    last_calls: tuple[CallRecord, ...] = ()

    @property
    def remaining(self) -> int:
        """Calls left in this category before the limit."""
        return max(0, self.limit - self.used)

    @property
    def retry_after_seconds(self) -> int:
        """Seconds until the counter resets, if the session stays idle from now."""
        return max(1, -(-(self.resets_at_ms - self.now_ms) // 1000))

    @property
    def message(self) -> str:
        """Why a call was refused, in one or two plain sentences for a model and a human."""
        resets = iso_utc(self.resets_at_ms)
        idle_minutes = max(1, round((self.resets_at_ms - self.now_ms) / 60000))
        if self.reason == SESSION_SUSPENDED:
            return (
                f"The tool '{self.tool}' was NOT run: session '{self.session_id}' has been "
                "suspended by an administrator, and every tool call in it is refused until "
                "an administrator resumes it. Stop calling tools and tell the user."
            )
        return (
            f"The tool '{self.tool}' was NOT run: session '{self.session_id}' has used its "
            f"'{self.category}' quota ({self.used}/{self.limit} calls). Stop calling "
            f"'{self.category}' tools and tell the user; the counter resets at {resets} "
            f"only if the session makes no calls for {idle_minutes} minutes (every attempt, "
            "even a refused one, restarts that wait), or sooner if an administrator "
            "raises the quota."
        )
