"""The pure quota decision: no I/O, no wall clock; times are epoch milliseconds passed in.
The rules a store's condition applies are written once, as data, in `quota.rules`; this
module holds the values they speak of."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from chalicelib.quota import calls, leases
from chalicelib.quota.derived import left, spent

# Named here too, where every caller has always found them.
CallRecord = calls.CallRecord
CallLife = calls.CallLife
CallState = calls.CallState
call_binding = calls.call_binding
call_id_key = calls.call_id_key
with_call = calls.with_call
fold_repeats = calls.fold_repeats
Lease = leases.Lease
LeaseId = leases.LeaseId
grant_of = leases.grant_of

# A retry of a timed-out check comes within seconds, a few times at most. A call id reused
# later or more often is a new call: a loop cannot run uncounted on one id.
REPLAY_WINDOW_MS = 60_000
MAX_REPLAYS = 3
# How long a call counted in its session may stay in progress: longer than any check runs
# (a check answers within its 4 s deadline; the Lambda's timeout is 5 s). A copy that finds
# it in progress later knows its check ended without admitting it (a crash): counted anew.
IN_PROGRESS_MS = 10_000
# Hex digits of an arguments digest the loop breaker keeps (48 bits: one tool's calls apart).
REPEAT_DIGEST_CHARS = 12


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
    REPEATED_CALL = "repeated_call"  # the loop breaker: same tool, same arguments


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
    # A copy of a call whose check is still counting it at the wider scopes: not allowed
    # (it may yet be refused there); the client tries again in a moment.
    IN_PROGRESS = "in_progress"
    # Seen, but not as a call that stands (counted before a reset, or left in progress
    # by a check that ended without admitting it): counted anew.
    REUSED_CALL_ID = "reused_call_id"
    # The call ran and had its duplicates (or is older than a retry comes): the id is
    # used up; a new call needs a new id (409, counted nowhere).
    CALL_ID_USED = "call_id_used"
    # A freed call id was taken by another copy first: explain the check again.
    CALL_ID_TAKEN = "call_id_taken"
    CALL_ID_CONFLICT = "call_id_conflict"  # counted for another tool or category
    OVER_LIMIT = "over_limit"
    REPEATED = "repeated"  # the tool was called with the same arguments too often
    STALE = "stale"  # the session read back no longer fails the condition: try again
    # The counters started after this check's clock (an admin reset in the same ms moves
    # their start past it): the check is made again at their start, so that what it
    # records belongs to these counters (a call id it counts binds in them).
    CLOCK_BEHIND = "clock_behind"


def repeat_key(tool: str, args_digest: str, window_ms: int, now_ms: int) -> str:
    """What the loop breaker counts a call under: its tool, a prefix of its arguments'
    digest (enough to tell a session's calls apart, and small in the session), and the
    end of the window it falls in (windows align to the epoch, like a budget's)."""
    end = (now_ms // window_ms + 1) * window_ms
    return f"{tool}|{args_digest[:REPEAT_DIGEST_CHARS]}|{end}"


def repeat_window_end(key: str) -> int:
    """When the window a `repeat_key` counts in ends, epoch ms (the key's last part)."""
    return int(key.rsplit("|", 1)[1])


def ended_repeats(keys: Iterable[str], now_ms: int) -> tuple[str, ...]:
    """The loop breaker's keys whose window has ended by `now_ms`: no rule reads them."""
    return tuple(sorted(key for key in keys if repeat_window_end(key) <= now_ms))


def spoken_window(ms: int) -> str:
    """A window's length as a message names it: "10-minute", "1-hour", "2-day"."""
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}-{unit}"
    return f"{max(1, ms // 1000)}-second"


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
        """The tenant's ceiling over everything its servers do (its shard 0)."""
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
    # A principal's streaks (escalation), by category: its refusals in a row there, and
    # when it was last refused there. Empty on other budgets.
    streaks: Mapping[str, int] = field(default_factory=dict)
    last_refusals: Mapping[str, int] = field(default_factory=dict)
    writes: Mapping[str, int] = field(default_factory=dict, compare=False)  # quota.writes
    marks: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # first refusals
    windows: Mapping[str, int] = field(default_factory=dict, compare=False)  # counted in

    @property
    def suspended(self) -> bool:
        """Whether an administrator (or escalation) suspended this principal."""
        return self.suspended_reason is not None

    def streak(self, category: str) -> int:
        """The principal's refusals in a row in a category."""
        return self.streaks.get(category, 0)

    @property
    def refusals_in_a_row(self) -> int:
        """The principal's longest streak in any category: the nearest to suspension."""
        return max(self.streaks.values(), default=0)

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
        return left(self.used, self.limit)


@dataclass(frozen=True)
class ClientInfo:
    """The MCP client an agent runs in, as its server reports it (each part optional)."""

    name: str | None = None  # from `initialize` clientInfo, or the request's `_meta`
    version: str | None = None
    oauth_client_id: str | None = None  # the OAuth client the server authenticated

    def describe(self) -> str:
        """As every view words it: "name version, OAuth client id"."""
        named = " ".join(p for p in (self.name, self.version) if p)
        oauth = self.oauth_client_id and f"OAuth client {self.oauth_client_id}"
        return ", ".join(p for p in (named, oauth) if p)


@dataclass(frozen=True)
class SessionSnapshot:
    """A session's counters as stored."""

    last_seen_ms: int
    started_ms: int
    counts: Mapping[str, int] = field(default_factory=dict)
    raised: Mapping[str, int] = field(default_factory=dict)
    refused: Mapping[str, int] = field(default_factory=dict)  # held ones included
    suspended: bool = False
    suspended_reason: str | None = None
    principal: str | None = None
    calls: tuple[CallRecord, ...] = ()
    raised_until: Mapping[str, int] = field(default_factory=dict)  # when a raise lapses
    server: str | None = None  # the MCP server that last named itself in a check
    leased: Mapping[str, int] = field(default_factory=dict)  # counted through leases, kept
    grants: Mapping[str, str] = field(default_factory=dict)  # each category's last lease
    first_refusals: Mapping[str, int] = field(default_factory=dict)  # limit first refused at
    client: ClientInfo | None = None  # the MCP client that last named itself in a check
    # The loop breaker's counts: calls by `repeat_key` (tool, digest prefix, window).
    repeats: Mapping[str, int] = field(default_factory=dict)
    # Call ids (in `call_id_key` form) the store still holds as counted, whether or not
    # `calls` shows them (a record folded away): what the store's condition reads.
    held_call_ids: frozenset[str] = frozenset()
    # When the last allowed call of each category in earlier last calls was (restarted).
    allowed_before: Mapping[str, int] = field(default_factory=dict)
    lives: Mapping[str, CallLife] = field(default_factory=dict)  # by `call_id_key`
    refused_held: Mapping[str, int] = field(default_factory=dict)  # of `refused`, held ones
    first_refused_by: Mapping[str, str | None] = field(default_factory=dict)  # its check

    def is_idle(self, now_ms: int, idle_ms: int) -> bool:
        """Whether the counters have expired: no attempt for longer than the idle timeout."""
        return self.last_seen_ms < now_ms - idle_ms

    def state(
        self, now_ms: int, idle_ms: int, base_limits: Mapping[str, int] | None = None
    ) -> SessionState:
        """The state the next check would see: suspended, else expired, else blocked
        (some category used up to its limit, given each enforced category's base limit:
        a shadow category refuses nothing, so it never blocks), else active."""
        if self.suspended:
            return SessionState.SUSPENDED
        if self.is_idle(now_ms, idle_ms):
            return SessionState.EXPIRED
        for category, base in (base_limits or {}).items():
            if spent(self.counts.get(category, 0), self.limit_for(category, base, now_ms)):
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
        """Whether a call counted (not a replay, nor refused) carries this call id, in the
        record or as the store holds it (what the store's condition reads)."""
        key = call_id_key(call_id)
        return key in self.held_call_ids or any(
            r.call_id == key and r.allowed and not r.replay for r in self.calls
        )

    def last_allowed_ms(self, besides: Attempt | None = None, category: str | None = None) -> int:
        """When the last call counted in this session (but `besides`; in `category`, if
        given) was made, as the last calls show (or, before them, `allowed_before`); 0 if
        unknown. A refusal after an allowed call of its category since the principal's
        last refusal there starts the principal's streak there again."""
        own = None if besides is None else besides.record(allowed=True)
        times = [
            r.at_ms
            for r in self.calls
            if r.allowed
            and (category is None or r.category == category)
            and not r.replay
            and not (own is not None and own.check_id == r.check_id)
            and not (own is not None and own.call_id is not None and own.call_id == r.call_id)
        ]
        before = self.allowed_before
        earlier = max(before.values(), default=0) if category is None else before.get(category, 0)
        return max(times, default=earlier)

    def life_of(self, call_id: str) -> CallLife | None:
        """The life of the call counted under this id in these counters, if its record
        is still kept (a reset or an idle restart ends what an id binds)."""
        if self.find_call(call_id) is None:
            return None
        return self.lives.get(call_id_key(call_id))

    def binds(self, call_id: str, binding: str, tool: str, category: str, units: int) -> bool:
        """Whether this call id, if counted here, was counted for this very call (its
        `call_binding`; for a call counted before ids bound more, its tool, category and
        calls asked): an id names one call, and is never a pass for another."""
        life = self.life_of(call_id)
        if life is not None:
            return life.binding == binding
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
        counted recently, admitted at every scope, has been replayed fewer than
        MAX_REPLAYS times, and was not refused since. A loop that reuses one id fails this
        after a few calls, for as long as its entries are in the record."""
        key = call_id_key(call_id)
        seen = [r for r in self.calls if r.call_id == key and r.at_ms >= self.started_ms]
        counted = [i for i, r in enumerate(seen) if r.allowed and not r.replay]
        if not counted:
            return False
        # Attempts before the original (refused, taken back when a wider budget refused
        # it, or left in progress by a check that ended) do not matter; after it, only
        # replays may follow.
        original, after = seen[counted[-1]], seen[counted[-1] + 1 :]
        if any(not r.allowed for r in after):
            return False
        life = self.lives.get(key)
        replays = len(after) if life is None else life.replays
        if life is not None and life.state is not CallState.ADMITTED:
            return False
        return replays < MAX_REPLAYS and now_ms - original.at_ms <= REPLAY_WINDOW_MS

    def in_progress(self, call_id: str, now_ms: int) -> bool:
        """Whether the call counted under this id is still being counted at the wider
        scopes by the check that counted it (not past `IN_PROGRESS_MS`)."""
        life = self.life_of(call_id)
        return life is not None and life.state is CallState.IN_PROGRESS and now_ms < life.until_ms


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
    client: ClientInfo | None = None
    # False for a call id that is free again (counted before a reset, taken back, left in
    # progress by a check that died): counted anew, on its life as read (`freed_life`).
    dedupe: bool = True
    units: int = 1  # calls counted at once: more than 1 only for a lease
    leased: bool = False  # the caller asked for a lease in a category that allows one
    asked: int = 1  # the calls the caller asked for (a lease's size, before any cut)
    clock_ms: int | None = None  # the clock's reading, when `now_ms` was moved past it
    args_digest: str | None = None  # the client's digest of the call's arguments
    freed_life: CallLife | None = None  # a freed call id's life as read (None: none)
    # Budgets above the session count this call too: counted in its session, it stays
    # in progress until they have (`CallState`).
    wider: bool = False

    @property
    def real_ms(self) -> int:
        """When the check was made by its own clock. `now_ms` may be a millisecond past
        it (`Verdict.CLOCK_BEHIND`): what is compared with other keys' times (a
        principal's refusals, a budget's windows) uses this one."""
        return self.now_ms if self.clock_ms is None else self.clock_ms

    # Shadow mode: the limit a refusal would enforce; `base_limit` is then the ceiling
    # the store counts up to, so that counting goes on past the policy's limit.
    shadow_limit: int | None = None
    held: int = 0  # refusals the client held since (vouched for): counted with this one
    answered: int = 0  # repeats refused from memory since (issue 29): recorded with this
    # The loop breaker: this call's `repeat_key`, how many such calls its window allows,
    # and the window (None: the category sets no `repeat`, or the client sent no digest).
    repeat_key: str | None = None
    repeat_limit: int = 0
    repeat_window_ms: int = 0
    transport_session: str | None = None  # the legacy Mcp-Session-Id: shown, no boundary

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
        return grant_of(self.check_id, self.now_ms, self.units, self.principal)

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
    def binding(self) -> str:
        """What this call's id binds (`call_binding`)."""
        return call_binding(self.tool, self.category, self.asked, self.args_digest, self.principal)

    def life(self) -> CallLife | None:
        """The life this check starts for its call id when it counts the call: in progress
        while wider budgets have yet to count it, else admitted at once."""
        if self.call_id is None:
            return None
        state = CallState.IN_PROGRESS if self.wider else CallState.ADMITTED
        return CallLife(state, self.check_id, self.binding, self.now_ms + IN_PROGRESS_MS)

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
            repeats=1 if allowed else 1 + self.held + self.answered,
            units=self.asked,
            held=0 if allowed else self.held,
            transport_session=self.transport_session,
        )
