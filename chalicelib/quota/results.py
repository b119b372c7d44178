"""Exactly-once writes: the result of an allowed call kept under its call id, what is
kept of a large one, and what a duplicate of it is answered with. Pure: the store is a
port (`CallResults`) that `storage` implements."""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol

from chalicelib.quota.core import REPLAY_WINDOW_MS

MAX_KEPT_BYTES = 64 * 1024  # a result's canonical JSON past this keeps only its digest


def keep_ms(idle_ms: int) -> int:
    """How long a result is kept: the session's idle timeout, and never less than the
    window in which a copy of its call is still answered as a duplicate."""
    return max(idle_ms, REPLAY_WINDOW_MS)


class ReplayState(enum.StrEnum):
    """What a duplicate of an allowed call in a replaying category is answered with."""

    STORED = "stored"  # the first run's result, to hand back instead of running again
    RUNNING = "running"  # no result stored yet: the first run has not ended
    NOT_KEPT = "not_kept"  # the first run's result was too large to keep


class StoreOutcome(enum.StrEnum):
    """What storing a result did: first write wins, the same result again is a no-op."""

    STORED = "stored"
    SAME = "same"  # this very result was stored before (a retry of the store)
    CONFLICT = "conflict"  # another result was stored first: kept, this one dropped


@dataclass(frozen=True)
class ResultKey:
    """Where a call's result is kept: the tenant comes from the token."""

    tenant: str
    session_id: str
    call_id: str


@dataclass(frozen=True)
class CallResult:
    """A call's result as kept: its JSON (None when cut), digest and size."""

    key: ResultKey
    tool: str
    digest: str  # sha256 of the canonical JSON, hex
    size: int  # bytes of the canonical JSON
    result: dict[str, Any] | None  # None: larger than MAX_KEPT_BYTES, only digested
    stored_ms: int
    expires_ms: int

    @property
    def truncated(self) -> bool:
        """Whether only the digest and size were kept."""
        return self.result is None


def canonical(result: dict[str, Any]) -> bytes:
    """The result's canonical JSON: what its digest and size are taken of."""
    return json.dumps(result, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def kept(
    key: ResultKey, tool: str, result: dict[str, Any], now_ms: int, keep_ms: int
) -> CallResult:
    """What is kept of a result: all of it up to MAX_KEPT_BYTES, else its digest and size."""
    text = canonical(result)
    small = len(text) <= MAX_KEPT_BYTES
    return CallResult(
        key=key,
        tool=tool,
        digest=hashlib.sha256(text).hexdigest(),
        size=len(text),
        result=result if small else None,
        stored_ms=now_ms,
        expires_ms=now_ms + keep_ms,
    )


def outcome(mine: CallResult, first: CallResult | None) -> StoreOutcome:
    """What a store of `mine` did, given the result found stored first (None: none was)."""
    if first is None:
        return StoreOutcome.STORED
    if (first.tool, first.digest) == (mine.tool, mine.digest):
        return StoreOutcome.SAME
    return StoreOutcome.CONFLICT


@dataclass(frozen=True)
class Replay:
    """What a duplicate is answered with: the state, and the result or its digest."""

    state: ReplayState
    result: dict[str, Any] | None = None
    digest: str | None = None
    size: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The `replay` field of the check's answer."""
        out: dict[str, Any] = {"state": self.state.value}
        if self.state is ReplayState.STORED:
            out["result"] = self.result
        elif self.state is ReplayState.NOT_KEPT:
            out["digest"] = self.digest
            out["size"] = self.size
            out["message"] = (
                "This call already ran once under this call id, but its result was larger "
                f"than {MAX_KEPT_BYTES // 1024} KiB and was not kept. The tool was NOT run "
                "again. Read the current state with a read tool instead of retrying."
            )
        return out


def answers_past_duplicates(replaying: bool, stored: CallResult | None, now_ms: int) -> bool:
    """Whether a copy of an admitted call that is no longer answered as a duplicate (past
    `MAX_REPLAYS` copies, or the replay window) is answered from the call's kept result:
    in a replaying category, while a result (or only its digest) is kept. It is neither
    counted nor recorded, and the MCP side runs nothing for it: its call already ran.
    Without a kept result the id stays used up (a loop cannot run on one id)."""
    return replaying and stored is not None and stored.expires_ms > now_ms


def replay_of(stored: CallResult | None, now_ms: int) -> Replay:
    """The replay of a duplicate: the stored result, its digest, or "still running".
    An expired result is none (TTL deletion can lag; expiry is checked here)."""
    if stored is None or stored.expires_ms <= now_ms:
        return Replay(ReplayState.RUNNING)
    if stored.result is None:
        return Replay(ReplayState.NOT_KEPT, digest=stored.digest, size=stored.size)
    return Replay(ReplayState.STORED, result=stored.result)


class CallResults(Protocol):
    """The results port: keep a call's result once, read it back."""

    def put_first(self, result: CallResult) -> CallResult | None:
        """Keep `result` unless one is kept under its key: None if it is now kept, else
        the result kept first (still live).

        Raises:
            StorageError: the store failed.
        """

    def get(self, key: ResultKey) -> CallResult | None:
        """The result kept under `key` (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """
