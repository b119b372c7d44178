"""The pure quota decision: no I/O, no wall clock; times are epoch milliseconds passed in.

The store applies one conditional update per check. When it refuses, the old session
comes back and `explain_refusal` says why, with the same rules the store's condition uses.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from chalicelib.clock import iso_utc

MAX_PLAIN_CALL_ID = 20
# A retry of a timed-out check comes within seconds, a few times at most. A call id
# reused later or more often is a new call: a loop cannot run uncounted on one id.
REPLAY_WINDOW_MS = 60_000
MAX_REPLAYS = 3


class SessionState(enum.StrEnum):
    """Where a session stands, as the next check would see it. Every view (API, listing,
    console, CLI, email) shows the one derivation: `SessionSnapshot.state`."""

    UNSEEN = "unseen"
    ACTIVE = "active"
    BLOCKED = "blocked"  # some category is at its limit: its next call there is refused
    EXPIRED = "expired"  # idle past the timeout: the next check starts the counters again
    SUSPENDED = "suspended"


class RefusalReason(enum.StrEnum):
    """Why a call was refused: the `error.code` of a refusal."""

    QUOTA_EXCEEDED = "quota_exceeded"
    SESSION_SUSPENDED = "session_suspended"
    PRINCIPAL_SUSPENDED = "principal_suspended"


class Scope(enum.StrEnum):
    """Which budget a limit belongs to: a session, whom the agent acts for, the tenant."""

    SESSION = "session"
    PRINCIPAL = "principal"
    TENANT = "tenant"


class Verdict(enum.Enum):
    """Why the store did not count a call, read from the session as it was."""

    EXPIRED = "expired"
    SUSPENDED = "suspended"
    ALREADY_COUNTED = "already_counted"  # this very check was counted (an SDK retry)
    DUPLICATE = "duplicate"  # a client's retry: answer with the original decision
    REUSED_CALL_ID = "reused_call_id"  # seen, but too late or too often to be a retry
    CALL_ID_CONFLICT = "call_id_conflict"  # counted for another tool or category
    OVER_LIMIT = "over_limit"
    STALE = "stale"  # the session read back no longer fails the condition: try again


@dataclass(frozen=True)
class SessionKey:
    """A session of one tenant: the tenant comes from the token, never from the body."""

    tenant: str
    session_id: str


@dataclass(frozen=True)
class BudgetKey:
    """A budget above the session: one principal's, or the whole tenant's (subject "")."""

    tenant: str
    scope: Scope
    subject: str = ""

    @classmethod
    def principal(cls, tenant: str, principal: str) -> BudgetKey:
        """The budget of whom an agent acts for."""
        return cls(tenant, Scope.PRINCIPAL, principal)

    @classmethod
    def whole_tenant(cls, tenant: str) -> BudgetKey:
        """The tenant's ceiling over everything its servers do."""
        return cls(tenant, Scope.TENANT)


@dataclass(frozen=True)
class Spend:
    """One call taken from a windowed budget: `limit` calls per window."""

    category: str
    limit: int
    window_start_ms: int
    window_end_ms: int
    now_ms: int
    units: int = 1  # calls taken at once: a lease takes all it grants


@dataclass(frozen=True)
class BudgetSnapshot:
    """A principal's or the tenant's counters as stored, for the current windows."""

    counts: Mapping[int, Mapping[str, int]] = field(default_factory=dict)  # by window start
    raised: Mapping[str, int] = field(default_factory=dict)
    suspended_reason: str | None = None
    refusals_in_a_row: int = 0  # a principal's streak (escalation); 0 on other budgets

    @property
    def suspended(self) -> bool:
        """Whether an administrator (or escalation) suspended this principal."""
        return self.suspended_reason is not None

    def used(self, category: str, window_start_ms: int) -> int:
        """Calls counted in a category in the window starting at `window_start_ms`."""
        return self.counts.get(window_start_ms, {}).get(category, 0)

    def limit_for(self, category: str, base_limit: int) -> int:
        """The effective limit: the policy's (or a grant's) or a raise, if higher."""
        return max(base_limit, self.raised.get(category, 0))


@dataclass(frozen=True)
class ScopeUse:
    """Where one scope's budget stands for a category after a check."""

    scope: Scope
    used: int
    limit: int
    window_seconds: int
    resets_at_ms: int

    @property
    def remaining(self) -> int:
        """Calls left in this scope's budget."""
        return max(0, self.limit - self.used)


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


@dataclass(frozen=True)
class SessionSnapshot:
    """A session's counters as stored."""

    last_seen_ms: int
    started_ms: int
    counts: Mapping[str, int] = field(default_factory=dict)
    raised: Mapping[str, int] = field(default_factory=dict)
    refused: Mapping[str, int] = field(default_factory=dict)
    suspended: bool = False
    suspended_reason: str | None = None
    principal: str | None = None
    calls: tuple[CallRecord, ...] = ()
    raised_until: Mapping[str, int] = field(default_factory=dict)  # when a raise lapses
    server: str | None = None  # the MCP server that last named itself in a check
    leased: Mapping[str, int] = field(default_factory=dict)  # counted through leases, kept

    def is_idle(self, now_ms: int, idle_ms: int) -> bool:
        """Whether the counters have expired: no attempt for longer than the idle timeout."""
        return self.last_seen_ms < now_ms - idle_ms

    def state(
        self, now_ms: int, idle_ms: int, base_limits: Mapping[str, int] | None = None
    ) -> SessionState:
        """The state the next check would see: suspended, else expired, else blocked
        (some category used up to its limit, given each category's base limit), else
        active."""
        if self.suspended:
            return SessionState.SUSPENDED
        if self.is_idle(now_ms, idle_ms):
            return SessionState.EXPIRED
        for category, base in (base_limits or {}).items():
            if self.counts.get(category, 0) >= self.limit_for(category, base, now_ms):
                return SessionState.BLOCKED
        return SessionState.ACTIVE

    def raise_for(self, category: str, now_ms: int) -> int | None:
        """The per-session raise in force at `now_ms`: None if none, or if it has lapsed."""
        raised = self.raised.get(category)
        until = self.raised_until.get(category)
        if raised is None or (until is not None and until <= now_ms):
            return None
        return raised

    def limit_for(self, category: str, base_limit: int, now_ms: int) -> int:
        """The effective limit at `now_ms`: the base (policy or grant) or a per-session
        raise that has not lapsed, if higher."""
        return max(base_limit, self.raise_for(category, now_ms) or 0)

    def counted(self, check_id: str) -> bool:
        """Whether the check with this service id was counted (its write went through)."""
        return any(r.check_id == check_id and r.allowed for r in self.calls)

    def holds_call_id(self, call_id: str) -> bool:
        """Whether any call (not a replay) in the record carries this call id."""
        key = call_id_key(call_id)
        return any(r.call_id == key and not r.replay for r in self.calls)

    def last_allowed_ms(self, besides: Attempt | None = None) -> int:
        """When the last call counted in this session (other than the attempt `besides`)
        was made, as far as the last calls show; 0 if none is there. A refusal in a
        session with an allowed call since its principal's last refusal starts the
        principal's streak again. When the record holds only refusals, every one of them
        came after the last allowed call, so the streak goes on, as it should."""
        own = None if besides is None else besides.record(allowed=True)
        times = [
            r.at_ms
            for r in self.calls
            if r.allowed
            and not r.replay
            and not (own is not None and own.check_id == r.check_id)
            and not (own is not None and own.call_id is not None and own.call_id == r.call_id)
        ]
        return max(times, default=0)

    def binds(self, call_id: str, tool: str, category: str, units: int = 1) -> bool:
        """Whether this call id, if counted here, was counted for this tool, category and
        number of calls asked: an id names one call, and is never a pass for another."""
        original = self.find_call(call_id)
        return original is None or (original.tool, original.category, original.units) == (
            tool,
            category,
            units,
        )

    def find_call(self, call_id: str) -> CallRecord | None:
        """The allowed (counted) call recorded under this call id since the counters
        started, if still in the record: a reset or an idle restart ends what an id binds."""
        key = call_id_key(call_id)
        for record in reversed(self.calls):
            if record.at_ms < self.started_ms:
                break
            if record.call_id == key and record.allowed and not record.replay:
                return record
        return None

    def replayable(self, call_id: str, now_ms: int) -> bool:
        """Whether a call with this id is a retry to answer from its original: the id was
        counted exactly once, recently, and has been replayed fewer than MAX_REPLAYS times,
        and was never refused. A loop that reuses one id fails this after a few calls, for
        as long as its entries are in the record."""
        key = call_id_key(call_id)
        seen = [r for r in self.calls if r.call_id == key and r.at_ms >= self.started_ms]
        counted = [i for i, r in enumerate(seen) if r.allowed and not r.replay]
        if len(counted) != 1:
            return False
        # Attempts before the original (refused, or taken back when a wider budget
        # failed) do not matter; after it, only replays may follow.
        original, after = seen[counted[0]], seen[counted[0] + 1 :]
        if any(not r.allowed for r in after):
            return False
        return len(after) < MAX_REPLAYS and now_ms - original.at_ms <= REPLAY_WINDOW_MS


@dataclass(frozen=True)
class Attempt:
    """One check: everything the store needs to count it, resolved before any I/O."""

    session: SessionKey
    tool: str
    category: str
    base_limit: int
    now_ms: int
    idle_ms: int
    check_id: str
    principal: str | None = None
    call_id: str | None = None
    server: str | None = None
    dedupe: bool = True  # False once a reused call id has had its replays: count it anew
    units: int = 1  # calls counted at once: more than 1 only for a lease
    leased: bool = False  # the caller asked for a lease in a category that allows one
    asked: int = 1  # the calls the caller asked for (a lease's size, before any cut)
    # Shadow mode: the limit a refusal would enforce; `base_limit` is then the ceiling
    # the store counts up to, so that counting goes on past the policy's limit.
    shadow_limit: int | None = None
    # Refusals of this category the client answered locally since its last check: folded
    # into this check's record when it is refused too ("delete_tag refused x37").
    held: int = 0

    @property
    def tenant(self) -> str:
        """The tenant the session belongs to."""
        return self.session.tenant

    @property
    def session_id(self) -> str:
        """The caller's session id."""
        return self.session.session_id

    @property
    def cutoff_ms(self) -> int:
        """Sessions last seen before this instant are idle-expired."""
        return self.now_ms - self.idle_ms

    @property
    def resets_at_ms(self) -> int:
        """When the counters reset if the session makes no further attempt."""
        return self.now_ms + self.idle_ms

    @property
    def lease_grant(self) -> str:
        """How the session keeps the lease this attempt grants, to check a return by."""
        return grant_of(self.check_id, self.now_ms, self.units)

    @property
    def weight(self) -> int:
        """The units a call asks for all or nothing (`units`); 1 for a lease, which is
        granted in part at the end of a budget."""
        return 1 if self.leased else self.units

    @property
    def limit_basis(self) -> int:
        """The base limit answers show and shadow mode judges by: the policy's (or a
        grant's), not the shadow ceiling the store counts to."""
        return self.base_limit if self.shadow_limit is None else self.shadow_limit

    @property
    def dedupe_call_id(self) -> str | None:
        """The client's call id, if this check must not count a call counted under it."""
        return self.call_id if self.dedupe else None

    def record(self, allowed: bool, replay: bool = False) -> CallRecord:
        """The last-calls entry for this attempt."""
        call_id = None if self.call_id is None else call_id_key(self.call_id)
        return CallRecord(
            self.now_ms,
            self.category,
            self.tool,
            allowed,
            self.principal,
            call_id,
            replay,
            self.check_id,
            repeats=1 if allowed else 1 + self.held,
            units=self.asked,
        )


def admits(snapshot: SessionSnapshot | None, attempt: Attempt) -> bool:
    """The store's condition for counting a call: a new session, or an active one that is
    not suspended, under its limit and has not counted this call id."""
    return snapshot is None or explain_refusal(snapshot, attempt) is Verdict.STALE


def explain_refusal(snapshot: SessionSnapshot, attempt: Attempt) -> Verdict:
    """Mirror of the store's condition: which clause failed for this old session."""
    if snapshot.counted(attempt.check_id):
        return Verdict.ALREADY_COUNTED
    if snapshot.suspended:
        return Verdict.SUSPENDED
    if snapshot.is_idle(attempt.now_ms, attempt.idle_ms):
        return Verdict.EXPIRED
    if attempt.call_id is not None and not snapshot.binds(
        attempt.call_id, attempt.tool, attempt.category, attempt.asked
    ):
        return Verdict.CALL_ID_CONFLICT
    call_id = attempt.dedupe_call_id
    if call_id is not None and snapshot.holds_call_id(call_id):
        if snapshot.find_call(call_id) and snapshot.replayable(call_id, attempt.now_ms):
            return Verdict.DUPLICATE
        # Counted and taken back (a wider budget refused it), or replayed too often.
        return Verdict.REUSED_CALL_ID
    used = snapshot.counts.get(attempt.category, 0)
    limit = snapshot.limit_for(attempt.category, attempt.base_limit, attempt.now_ms)
    if used + attempt.units > limit:
        return Verdict.OVER_LIMIT
    return Verdict.STALE


def partial_units(snapshot: SessionSnapshot, attempt: Attempt) -> int:
    """How many calls a lease that did not fit may still be granted: what remains under
    the limit (0: none, the call is refused). Weighed calls (`units`) are never cut."""
    if not attempt.leased:
        return 0
    used = snapshot.counts.get(attempt.category, 0)
    limit = snapshot.limit_for(attempt.category, attempt.base_limit, attempt.now_ms)
    return max(0, min(attempt.units - 1, limit - used))


LEASE_ID = re.compile(
    r"^(?P<category>[a-z][a-z0-9_]{0,31})\.(?P<check>[A-Za-z0-9_-]{1,12})\.(?P<units>[1-9][0-9]{0,2})"
    r"\.(?P<granted>[0-9a-z]{1,12})\.(?P<started>[0-9a-z]{1,12})$"
)


@dataclass(frozen=True)
class Lease:
    """Calls granted in one check, this call included, for the client to spend locally.

    The id names the grant: category, check id, calls granted, when, and the session
    counters' generation, so that a return can be capped and applied once without a read.
    """

    category: str
    check_id: str
    granted: int
    granted_ms: int
    started_ms: int
    expires_at_ms: int
    lease_max: int
    lease_seconds: int

    @property
    def lease_id(self) -> str:
        """The id a client sends back with the calls it did not spend."""
        return ".".join(
            (
                self.category,
                self.check_id,
                str(self.granted),
                _base36(self.granted_ms),
                _base36(self.started_ms),
            )
        )


@dataclass(frozen=True)
class LeaseId:
    """A lease id as a client sends it back: what the grant was, unverified."""

    category: str
    check_id: str
    granted: int
    granted_ms: int
    started_ms: int

    @property
    def grant(self) -> str:
        """The grant this id claims, in the form the session keeps its last lease in: a
        return is applied only if the two are equal, so a forged or altered id (another
        size, time or check) gives nothing back."""
        return grant_of(self.check_id, self.granted_ms, self.granted)

    @classmethod
    def parse(cls, text: str) -> LeaseId | None:
        """The lease id's parts, or None if it is not one this service issues."""
        match = LEASE_ID.fullmatch(text)
        if match is None:
            return None
        return cls(
            match["category"],
            match["check"],
            int(match["units"]),
            int(match["granted"], 36),
            int(match["started"], 36),
        )


def grant_of(check_id: str, granted_ms: int, units: int) -> str:
    """A lease as the session keeps it: which check granted it, when, how many calls."""
    return f"{check_id}|{granted_ms}|{units}"


def _base36(value: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, digit = divmod(value, 36)
        out = digits[digit] + out
        if value == 0:
            return out


@dataclass(frozen=True)
class _Answer:
    """What every answer to a check says: the call, its budget and when it resets."""

    session_id: str
    tool: str
    category: str
    used: int
    limit: int
    now_ms: int
    resets_at_ms: int


@dataclass(frozen=True)
class Allowed(_Answer):
    """The call was counted (or is a retry of one that was): it may run."""

    duplicate: bool = False
    scopes: tuple[ScopeUse, ...] = ()  # the budgets above the session it was counted in
    last_calls: tuple[CallRecord, ...] = ()
    lease: Lease | None = None  # calls granted at once (this one included), if leased
    shadow: Refused | None = None  # shadow mode: the refusal an enforcing policy would give

    @property
    def allowed(self) -> bool:
        """Always True: lets callers read `decision.allowed` on either kind."""
        return True

    @property
    def remaining(self) -> int:
        """Calls left in this category before the limit."""
        return max(0, self.limit - self.used)


@dataclass(frozen=True)
class Refused(_Answer):
    """The call was refused, not run: why, and the evidence."""

    reason: RefusalReason
    scope: Scope = Scope.SESSION
    first_exhaustion: bool = False
    last_calls: tuple[CallRecord, ...] = ()
    scopes: tuple[ScopeUse, ...] = ()
    principal: str | None = None
    escalated: bool = False  # this refusal suspended the principal
    started_ms: int | None = None  # when the session's counters started: its first call
    units: int = 1  # the units the call asked for at once, all or nothing

    @property
    def allowed(self) -> bool:
        """Always False: lets callers read `decision.allowed` on either kind."""
        return False

    @property
    def suspended(self) -> bool:
        """Whether a suspension refused it (waiting does not help)."""
        return self.reason in (
            RefusalReason.SESSION_SUSPENDED,
            RefusalReason.PRINCIPAL_SUSPENDED,
        )

    @property
    def remaining(self) -> int:
        """Calls left before the limit: none while suspended, whatever the counters say."""
        return 0 if self.suspended else max(0, self.limit - self.used)

    @property
    def retry_after_seconds(self) -> int:
        """Seconds until the refusing budget refills (a session's, if it stays idle)."""
        return max(1, -(-(self.resets_at_ms - self.now_ms) // 1000))

    @property
    def message(self) -> str:
        """Why the call was refused, in one or two plain sentences for a model and a human."""
        if self.reason is RefusalReason.PRINCIPAL_SUSPENDED:
            return (
                f"The tool '{self.tool}' was NOT run: principal '{self.principal}' has been "
                "suspended, and every tool call made for it is refused, in every session, "
                "until an administrator resumes it. Stop calling tools and tell the user."
            )
        if self.suspended:
            return (
                f"The tool '{self.tool}' was NOT run: session '{self.session_id}' has been "
                "suspended by an administrator, and every tool call in it is refused until "
                "an administrator resumes it. Stop calling tools and tell the user."
            )
        resets = iso_utc(self.resets_at_ms)
        if self.units > 1 and self.remaining > 0:
            return self._units_message(resets)
        if self.scope is not Scope.SESSION:
            whose = (
                f"principal '{self.principal}'"
                if self.scope is Scope.PRINCIPAL
                else "this whole site (the tenant ceiling over all its servers and agents)"
            )
            return (
                f"The tool '{self.tool}' was NOT run: {whose} has used its '{self.category}' "
                f"budget for this window ({self.used}/{self.limit} calls), whatever the "
                f"session. Stop calling '{self.category}' tools and tell the user; the "
                f"budget refills at {resets}, or sooner if an administrator raises it."
            )
        idle_minutes = max(1, round((self.resets_at_ms - self.now_ms) / 60000))
        return (
            f"The tool '{self.tool}' was NOT run: session '{self.session_id}' has used its "
            f"'{self.category}' quota ({self.used}/{self.limit} calls). Stop calling "
            f"'{self.category}' tools and tell the user; the counter resets at {resets} "
            f"only if the session makes no calls for {idle_minutes} minutes (every attempt, "
            "even a refused one, restarts that wait), or sooner if an administrator "
            "raises the quota."
        )

    def _units_message(self, resets: str) -> str:
        """A weighed call that does not fit while the budget still has room: nothing was
        counted, and fewer units may still run."""
        whose = {
            Scope.SESSION: f"session '{self.session_id}'",
            Scope.PRINCIPAL: f"principal '{self.principal}'",
            Scope.TENANT: "this whole site (the tenant ceiling)",
        }[self.scope]
        left = self.remaining
        return (
            f"The tool '{self.tool}' was NOT run: it asks for {self.units} '{self.category}' "
            f"units at once, and {whose} has {left} unit{'s' if left != 1 else ''} left "
            f"({self.used}/{self.limit} used). Nothing was counted. A call is counted whole "
            f"or not at all: ask for at most {left} at once, or stop and tell the user; the "
            f"budget refills at {resets}, or sooner if an administrator raises it."
        )


Decision = Allowed | Refused
