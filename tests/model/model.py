"""The reference model: the quota rules of issue 18 in plain Python, written from the
rules, not from the service's code.

The model is a set of possible states. Where the rules leave a choice open (an injected
fault the service may have absorbed, how much of a lease came back at the tenant scope,
a call id from before a reset), a step keeps every state that gives the answer the
service gave, and the views read after the step narrow the set again. An empty set is a
disagreement. Every open choice is listed in `tests/model/README.md`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

READ = "read"
WRITE = "write"
CATEGORIES = (READ, WRITE)

# The small policy the model and the service both use: limits are hit in a few calls.
SESSION_LIMIT = {READ: 5, WRITE: 3}
LEASE_MAX = {READ: 3}
PRINCIPAL_WINDOW = {WRITE: (4, 60)}  # category: (limit, window seconds)
TENANT_WINDOW = {WRITE: (6, 60), READ: (8, 60)}
SUSPEND_AFTER = 3
IDLE_SECONDS = 30
REPLAY_WINDOW_MS = 60_000
MAX_REPLAYS = 3
RECORD_CALLS = 10  # the session's record holds its last 10 calls
OWN_PRINCIPAL = "token:dev-server"  # what a check without a principal counts as
TOOL_CATEGORY = {"search_docs": READ, "get_page": READ, "delete_tag": WRITE, "update_page": WRITE}
UNRULED_TOOL = "misc_tool"  # no policy rule: the category the request names

POLICY_DOCUMENT = {
    "version": 1,
    "categories": {
        READ: {
            "limit": SESSION_LIMIT[READ],
            "lease": True,
            "lease_max": LEASE_MAX[READ],
            "tenant": {"limit": TENANT_WINDOW[READ][0], "window": "60s"},
        },
        WRITE: {
            "limit": SESSION_LIMIT[WRITE],
            "principal": {"limit": PRINCIPAL_WINDOW[WRITE][0], "window": "60s"},
            "tenant": {"limit": TENANT_WINDOW[WRITE][0], "window": "60s"},
        },
    },
    "suspend_after_refusals": SUSPEND_AFTER,
    "rules": [
        {"tools": sorted(t for t, c in TOOL_CATEGORY.items() if c == READ), "category": READ},
        {"tools": sorted(t for t, c in TOOL_CATEGORY.items() if c == WRITE), "category": WRITE},
    ],
}


def classify(tool: str, requested: str | None) -> str:
    """The policy's rule for the tool, else the category asked for, else the most
    restrictive category (the smallest session limit)."""
    if tool in TOOL_CATEGORY:
        return TOOL_CATEGORY[tool]
    if requested is not None:
        return requested
    return min(CATEGORIES, key=lambda c: SESSION_LIMIT[c])


def window_start(now_ms: int, seconds: int) -> int:
    """Fixed windows aligned to epoch multiples of their length."""
    return now_ms - now_ms % (seconds * 1000)


# -- what a step is expected to answer ---------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """One answer the service may give. `codes`/`scopes`: the acceptable refusal codes and
    scopes (the rules do not order scopes that are all spent)."""

    status: int
    duplicate: bool = False
    granted: int | None = None
    codes: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()
    returned: int | None = None

    def describe(self) -> str:
        if self.status == 200 and self.returned is not None:
            return f"200 returned={self.returned}"
        if self.status == 200:
            return f"200 duplicate={self.duplicate} granted={self.granted}"
        if self.status == 429:
            return f"429 code in {sorted(self.codes)} scope in {sorted(self.scopes)}"
        return str(self.status)


ALLOWED = Expected(200)
REPLAYED = Expected(200, duplicate=True)
CONFLICT = Expected(409, codes=frozenset({"call_id_conflict"}))
# A copy that came while its original was counted in the session but not yet at every
# wider scope (every category of the model's policy has one): never allowed.
IN_PROGRESS = Expected(409, codes=frozenset({"call_in_progress"}))
FAULT = Expected(503)
NOT_FOUND = Expected(404)


def went_wider(expected: Expected) -> bool:
    """Whether a check answered so was counted in its session and went on to the wider
    scopes (its call id in progress meanwhile): allowed, or refused above the session."""
    if expected.status == 200:
        return not expected.duplicate and expected.returned is None
    return expected.status == 429 and bool(expected.scopes - {"session"})


# -- the state -------------------------------------------------------------------------


@dataclass
class CallId:
    """A call id whose original call was allowed: what it is bound to, and the session's
    record counts (lowest, highest possible) just after the original was recorded."""

    tool: str
    category: str
    units: int
    at_ms: int
    records_low: int
    records_high: int
    principal: str
    args: str | None = None  # what the call's `args_digest` digests, if sent
    replays: int = 0


@dataclass
class LeaseGrant:
    session: str
    category: str
    granted: int
    generation: int
    tenant_window: int | None  # the tenant window the lease was counted in
    returned: bool = False


@dataclass
class Session:
    generation: int = 0  # bumped when the counters start again (idle expiry, reset)
    last_seen_ms: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    raised: dict[str, int] = field(default_factory=dict)
    suspended: bool = False
    call_ids: dict[str, CallId] = field(default_factory=dict)
    last_allowed_ms: dict[str, int] = field(default_factory=dict)  # by category
    peak: dict[str, int] = field(default_factory=dict)  # highest raise of this generation
    # The session's record of calls, counted as bounds: a run of identical refusals folds
    # into one record, and whether a replay or a 409 is recorded is the service's business.
    records_low: int = 0
    records_high: int = 0
    last_was_refusal: bool = False
    marked: bool = False  # ever spent, refused or suspended: may be in the trouble listing
    trouble: bool = False  # refused or suspended since its last restart or admin change

    def held(self, call_id: str) -> bool | None:
        """Whether the record still holds the call id's counted original (None: maybe)."""
        record = self.call_ids[call_id]
        if self.records_high - record.records_high < RECORD_CALLS:
            return True
        if self.records_low - record.records_low >= RECORD_CALLS:
            return False
        return None

    def record(self, refusal: bool = False, maybe: bool = False) -> None:
        """One more call in the session's record (`maybe`: it may not be recorded)."""
        certain = not maybe and not (refusal and self.last_was_refusal)
        self.records_low += 1 if certain else 0
        self.records_high += 1
        if not maybe:
            self.last_was_refusal = refusal

    def expired(self, now_ms: int) -> bool:
        return now_ms - self.last_seen_ms > IDLE_SECONDS * 1000

    def limit(self, category: str) -> int:
        return max(SESSION_LIMIT[category], self.raised.get(category, 0))

    def restart(self, now_ms: int) -> None:
        """Idle expiry as the next check applies it: counters and raises start again; a
        suspension stays."""
        self.generation += 1
        self.counts = {}
        self.raised = {}
        self.peak = {}
        self.last_seen_ms = now_ms
        self.call_ids = {}  # the record starts again with the counters
        self.trouble = False


@dataclass
class Principal:
    counts: dict[tuple[str, int], int] = field(default_factory=dict)  # (category, window)
    raised: dict[str, int] = field(default_factory=dict)
    suspended: bool = False
    # Escalation, by category: refusals in a row there, and when the last one was.
    streaks: dict[str, int] = field(default_factory=dict)
    last_refusal_ms: dict[str, int] = field(default_factory=dict)
    by_admin: bool = False  # an administrator suspended it (not escalation)
    stored: bool = False  # certainly has a stored budget (a counted call or an admin's act)

    def limit(self, category: str) -> int:
        return max(PRINCIPAL_WINDOW[category][0], self.raised.get(category, 0))


@dataclass
class View:
    """What the admin views should show, in the form the driver reads them."""

    sessions: dict[str, tuple[str, dict[str, int]]]  # id: (state, used by category)
    principals: dict[str, tuple[str, int]]  # principal: (state, write used this window)
    tenant: dict[str, int]  # category: used this window
    escalations: dict[str, int]  # principal: suspension emails
    # principal: refusals in a row by category (none at 0)
    streaks: dict[str, dict[str, int]] = field(default_factory=dict)
    by_admin: frozenset[str] = frozenset()  # principals an administrator suspended


@dataclass
class State:
    now_ms: int
    seq: int = 0
    sessions: dict[str, Session] = field(default_factory=dict)
    principals: dict[str, Principal] = field(default_factory=dict)
    tenant: dict[tuple[str, int], int] = field(default_factory=dict)
    leases: dict[str, LeaseGrant] = field(default_factory=dict)
    pending_lease: LeaseGrant | None = None  # granted by the last check; its id comes back
    escalations: dict[str, int] = field(default_factory=dict)

    def copy(self) -> State:
        return copy.deepcopy(self)

    def principal(self, name: str) -> Principal:
        return self.principals.setdefault(name, Principal())

    # -- views ---------------------------------------------------------------------

    def session_state(self, sid: str) -> str:
        """suspended > expired > blocked > active."""
        sess = self.sessions[sid]
        if sess.suspended:
            return "suspended"
        if sess.expired(self.now_ms):
            return "expired"
        if any(sess.counts.get(c, 0) >= sess.limit(c) for c in CATEGORIES):
            return "blocked"
        return "active"

    def views(self, principals: tuple[str, ...]) -> list[View]:
        """What the views may show: a suspended session past its idle timeout may show
        its counters as zero (expired) or as they stood (suspended takes precedence)."""
        out = [self.view(principals)]
        if any(s.suspended and s.expired(self.now_ms) and s.counts for s in self.sessions.values()):
            out.append(self.view(principals, stale_when_suspended=True))
        return out

    def view(self, principals: tuple[str, ...], stale_when_suspended: bool = False) -> View:
        sessions: dict[str, tuple[str, dict[str, int]]] = {}
        for sid, sess in self.sessions.items():
            fresh = sess.expired(self.now_ms) and not (stale_when_suspended and sess.suspended)
            used = {c: 0 if fresh else sess.counts.get(c, 0) for c in CATEGORIES}
            sessions[sid] = (self.session_state(sid), used)
        shown: dict[str, tuple[str, int]] = {}
        start = window_start(self.now_ms, PRINCIPAL_WINDOW[WRITE][1])
        for name in principals:
            p = self.principals.get(name, Principal())
            state = "suspended" if p.suspended else "active"
            shown[name] = (state, p.counts.get((WRITE, start), 0))
        tenant = {
            c: self.tenant.get((c, window_start(self.now_ms, w[1])), 0)
            for c, w in TENANT_WINDOW.items()
        }
        streaks = {
            name: {c: n for c, n in sorted(p.streaks.items()) if n > 0}
            for name, p in self.principals.items()
            if name in principals
        }
        streaks.update({name: {} for name in principals if name not in streaks})
        admin = frozenset(n for n, p in self.principals.items() if p.suspended and p.by_admin)
        return View(sessions, shown, tenant, dict(self.escalations), streaks, admin)

    def limits(self, principals: tuple[str, ...]) -> View:
        """The limit of every scope, in the shape of a view (the state fields unused): a
        session's highest of this generation, since a lower may leave it over the base."""
        sessions = {
            sid: ("", {c: max(s.limit(c), s.peak.get(c, 0)) for c in CATEGORIES})
            for sid, s in self.sessions.items()
        }
        shown = {n: ("", self.principals.get(n, Principal()).limit(WRITE)) for n in principals}
        return View(sessions, shown, {c: w[0] for c, w in TENANT_WINDOW.items()}, {})

    def key(self) -> str:
        return repr(self)

    # -- checks ----------------------------------------------------------------------

    def check(
        self,
        sid: str,
        tool: str,
        category: str | None,
        principal: str | None,
        call_id: str | None,
        lease: int | None,
        args: str | None = None,
    ) -> list[tuple[Expected, State]]:
        """Every answer a check may get, each with the state after it."""
        cat = classify(tool, category)
        leased = lease is not None and cat in LEASE_MAX
        units = lease if leased and lease is not None else 1
        who = principal or OWN_PRINCIPAL
        out: list[tuple[Expected, State]] = []
        keep = False  # a suspension refusing a retry leaves its original standing
        base = self.copy()
        base.seq += 1
        base.pending_lease = None
        sess = base.sessions.get(sid)
        # Idle expiry clears the record with the counters.
        live_session = sess is not None and not sess.expired(base.now_ms)
        record = None if sess is None or call_id is None else sess.call_ids.get(call_id)
        if sess is not None and live_session and record is not None and call_id is not None:
            held = sess.held(call_id)
            # An id binds its tool, category, units, principal and arguments' digest (or
            # none sent): anything else under it is another call, a 409.
            bound = (record.tool, record.category, record.units, record.principal, record.args)
            same = bound == (tool, cat, units, who, args)
            fresh = base.now_ms - record.at_ms <= REPLAY_WINDOW_MS
            live = fresh and record.replays < MAX_REPLAYS
            stopped = sess.suspended or base.principal(who).suspended
            if held is not False:
                after = base.copy()
                after_sess = after.sessions[sid]
                if same and live:
                    after_sess.call_ids[call_id].replays += 1
                    after_sess.last_seen_ms = base.now_ms
                    after_sess.record(maybe=True)
                    out.append((REPLAYED, after))
                else:
                    # Another call's id, or one used up (its duplicates answered, or too
                    # old for a retry): a 409 that counts nothing and records nothing.
                    out.append((CONFLICT, after))
                if held and not stopped:
                    return out
                keep = stopped
        out.extend(base._new_call(sid, tool, cat, who, call_id, units, leased, keep, args))
        return out

    def held_back(
        self, sid: str, tool: str, category: str | None, principal: str | None
    ) -> list[tuple[Expected, State]]:
        """A check without a call id sent at once with others, refused because one of
        them, refused later above the session, held a unit of the session's or the
        principal's budget meanwhile (each scope is counted in turn, and what a refused
        call took is given back after: under-admission, never over). Refused as if that
        scope were spent, with what a refusal there changes."""
        cat = classify(tool, category)
        who = principal or OWN_PRINCIPAL
        st = self.copy()
        st.seq += 1
        st.pending_lease = None
        sess = st.sessions.get(sid)
        if sess is None or sess.suspended or st.principal(who).suspended:
            return []
        if sess.expired(st.now_ms):
            sess.restart(st.now_ms)
        sess.last_seen_ms = st.now_ms
        held = frozenset({"session", "principal"} if cat in PRINCIPAL_WINDOW else {"session"})
        expected = Expected(429, codes=frozenset({"quota_exceeded"}), scopes=held)
        return [(expected, after) for after in st._refused(sid, who, cat)]

    def with_streak_ended(self, principal: str | None, category: str) -> State:
        """This state with the principal's streak in `category` ended (an allowed call
        at the same millisecond as a refusal ended it after)."""
        ended = self.copy()
        who = ended.principal(principal or OWN_PRINCIPAL)
        if not who.suspended:  # a suspension the streak reached stands
            who.streaks.pop(category, None)
        return ended

    def past_the_gate(self, principal: str | None, start: State) -> State | None:
        """For copies sent at once: this state as a copy that passed the principal's
        gate before another copy's refusal suspended the principal sees it (None: the
        principal was suspended before the copies came, or is not)."""
        who = principal or OWN_PRINCIPAL
        now, before = self.principals.get(who), start.principals.get(who)
        if now is None or not now.suspended or (before is not None and before.suspended):
            return None
        passed = self.copy()
        passed.principal(who).suspended = False
        return passed

    def suspended_again(self, principal: str | None, before: State) -> State:
        """After `past_the_gate`: the principal stays suspended, with no second email."""
        who = principal or OWN_PRINCIPAL
        self.principal(who).suspended = True
        self.escalations = dict(before.escalations)
        return self

    def _new_call(
        self,
        sid: str,
        tool: str,
        cat: str,
        who: str,
        call_id: str | None,
        units: int,
        leased: bool,
        keep_call_id: bool = False,
        args: str | None = None,
    ) -> list[tuple[Expected, State]]:
        st = self.copy()
        p = st.principal(who)
        out: list[tuple[Expected, State]] = []
        if p.suspended:
            # Refused before the session is touched: not created, no idle refresh, nothing
            # recorded, no streak.
            untouched = self.copy()
            refusal = frozenset({"principal_suspended"})
            out.append((Expected(429, codes=refusal, scopes=frozenset({"principal"})), untouched))
            existing = st.sessions.get(sid)
            if existing is None or not existing.suspended:
                return out
        sess = st.sessions.setdefault(sid, Session(last_seen_ms=st.now_ms))
        if sess.expired(st.now_ms):
            sess.restart(st.now_ms)
        sess.last_seen_ms = st.now_ms
        if sess.suspended:
            refusal = frozenset({"session_suspended"})
            expected = Expected(429, codes=refusal, scopes=frozenset({"session"}))
            refused = st._refused(sid, who, cat, keep_call_id)
            return [*out, *((expected, s) for s in refused)]
        remaining = {"session": sess.limit(cat) - sess.counts.get(cat, 0)}
        if cat in PRINCIPAL_WINDOW:
            start = window_start(st.now_ms, PRINCIPAL_WINDOW[cat][1])
            remaining["principal"] = p.limit(cat) - p.counts.get((cat, start), 0)
        if cat in TENANT_WINDOW:
            start = window_start(st.now_ms, TENANT_WINDOW[cat][1])
            remaining["tenant"] = TENANT_WINDOW[cat][0] - st.tenant.get((cat, start), 0)
        granted = min(units, LEASE_MAX.get(cat, 1), *remaining.values())
        if granted < 1:
            spent = frozenset(s for s, left in remaining.items() if left <= 0)
            expected = Expected(429, codes=frozenset({"quota_exceeded"}), scopes=spent)
            return [(expected, s) for s in st._refused(sid, who, cat, keep_call_id)]
        sess.counts[cat] = sess.counts.get(cat, 0) + granted
        if sess.counts[cat] >= sess.limit(cat):
            sess.marked = sess.trouble = True  # the call that takes the last unit marks it
        tenant_window = None
        if cat in PRINCIPAL_WINDOW:
            start = window_start(st.now_ms, PRINCIPAL_WINDOW[cat][1])
            p.counts[(cat, start)] = p.counts.get((cat, start), 0) + granted
            p.streaks[cat] = 0  # only the allowed call's category: the others stand
            p.stored = True
        if cat in TENANT_WINDOW:
            tenant_window = window_start(st.now_ms, TENANT_WINDOW[cat][1])
            st.tenant[(cat, tenant_window)] = st.tenant.get((cat, tenant_window), 0) + granted
        sess.last_allowed_ms[cat] = st.now_ms
        sess.last_was_refusal = False
        sess.record()
        if call_id is not None:
            low, high = sess.records_low, sess.records_high
            record = CallId(tool, cat, units, st.now_ms, low, high, who, args)
            sess.call_ids[call_id] = record
        if leased:
            st.pending_lease = LeaseGrant(sid, cat, granted, sess.generation, tenant_window)
        return [(Expected(200, granted=granted if leased else None), st)]

    def _refused(self, sid: str, who: str, cat: str, retried: bool = False) -> list[State]:
        """A refusal of `who`'s call in category `cat` in session `sid`: the session's
        record and mark, the principal's streak in `cat`, and escalation; this state, and
        another where the order is open. The rules order the session's last allowed call
        in `cat` and the principal's last refusal in `cat` by time (what it does in other
        categories never ends the run); in one millisecond they leave it open (a check in
        the millisecond of a reset is counted in the next one), so the run may go on or
        start again."""
        p, sess = self.principal(who), self.sessions[sid]
        allowed, last = sess.last_allowed_ms.get(cat, -1), p.last_refusal_ms.get(cat, -1)
        tie = allowed == last >= 0
        other = self.copy() if tie else None
        self._streak(sid, who, cat, retried, allowed > last)
        if other is None:
            return [self]
        other._streak(sid, who, cat, retried, True)
        return [self, other]

    def _streak(self, sid: str, who: str, cat: str, retried: bool, again: bool) -> None:
        p = self.principal(who)
        sess = self.sessions[sid]
        sess.record(refusal=True, maybe=retried)
        sess.marked = sess.trouble = True
        if again:
            p.streaks[cat] = 1  # the session went on in `cat` after the last refusal there
        else:
            p.streaks[cat] = p.streaks.get(cat, 0) + 1
        p.last_refusal_ms[cat] = self.now_ms
        if p.streaks[cat] >= SUSPEND_AFTER and not p.suspended:
            p.suspended = True
            p.stored = True
            self.escalations[who] = self.escalations.get(who, 0) + 1

    def bind_lease(self, lease_id: str) -> None:
        """The id the service gave the lease the last check granted."""
        if self.pending_lease is not None:
            self.leases[lease_id] = self.pending_lease
            self.pending_lease = None

    def return_lease(self, sid: str, lease_id: str, unused: int) -> list[tuple[Expected, State]]:
        """A return gives back at most min(unused, granted) calls to the session, once,
        only to the generation that granted it; the tenant scope may get as many back (in
        the window that counted them) or none. An unknown id gives back nothing."""
        grant = self.leases.get(lease_id)
        nothing = [(Expected(200, returned=0), self.copy())]
        if grant is None or grant.session != sid:
            return [*nothing, (Expected(400), self.copy())]
        sess = self.sessions[sid]
        gen = sess.generation + (1 if sess.expired(self.now_ms) else 0)
        if grant.returned or gen != grant.generation:
            return nothing
        out = nothing
        for n in range(1, min(unused, grant.granted) + 1):
            for tenant_too in (False, True):
                st = self.copy()
                st.sessions[sid].counts[grant.category] -= n
                st.leases[lease_id].returned = True
                key = (grant.category, grant.tenant_window or 0)
                now_window = window_start(st.now_ms, TENANT_WINDOW[grant.category][1])
                if tenant_too:
                    if grant.tenant_window != now_window:
                        continue
                    st.tenant[key] = st.tenant.get(key, 0) - n
                out.append((Expected(200, returned=n), st))
        return out

    # -- administrators ------------------------------------------------------------

    def session_admin(
        self, action: str, sid: str, category: str, add: int
    ) -> list[tuple[Expected, State]]:
        st = self.copy()
        sess = st.sessions.get(sid)
        if sess is None:
            return [(NOT_FOUND, st)]
        expired = sess.expired(st.now_ms)
        sess.trouble = False  # whether an admin's act keeps it listed: the service's business
        if action == "raise":
            if expired:
                sess.restart(st.now_ms)  # the raise applies to the counters that start now
            sess.raised[category] = sess.limit(category) + add
            sess.peak[category] = max(sess.peak.get(category, 0), sess.raised[category])
            return [(ALLOWED, st)]
        if action == "lower":
            if category not in sess.raised or expired:
                other = st.copy()
                other.sessions[sid].raised.pop(category, None)
                out = [(Expected(409), st)]
                return [*out, (ALLOWED, other)] if expired and category in sess.raised else out
            del sess.raised[category]
            return [(ALLOWED, st)]
        if action == "suspend":
            sess.suspended = sess.marked = True
            return [(ALLOWED, st)]
        if action == "resume":
            sess.suspended = False
            return [(ALLOWED, st)]
        assert action == "reset"
        sess.counts = {}
        sess.peak = dict(sess.raised)
        sess.generation += 1
        sess.call_ids = {}  # the record starts again with the counters
        # Whether the idle clock restarts with the new counters is open (README, 7): the
        # rules time it from the last check attempt, and a reset starts fresh counters.
        refreshed = st.copy()
        refreshed.sessions[sid].last_seen_ms = st.now_ms
        return [(ALLOWED, st), (ALLOWED, refreshed)]

    def principal_admin(self, action: str, who: str, add: int) -> list[tuple[Expected, State]]:
        st = self.copy()
        p = st.principal(who)
        if action == "suspend":
            p.suspended = p.by_admin = True
            p.stored = True
            return [(ALLOWED, st)]
        if action == "raise":
            p.raised[WRITE] = p.limit(WRITE) + add
            p.streaks[WRITE] = 0  # the raised category's streak only
            p.stored = True
            return [(ALLOWED, st)]
        unchanged = self.copy()
        if action == "resume":
            p.suspended = p.by_admin = False
        else:
            assert action == "reset"
            p.counts = {}
        p.streaks = {}  # every category's
        if p.stored:
            return [(ALLOWED, st)]
        # Never counted nor acted on: whether a budget is stored (refusals only) is the
        # service's business; 404 changes nothing.
        return [(ALLOWED, st), (NOT_FOUND, unchanged)]

    def faulted(self, sid: str | None) -> list[State]:
        """The states a check answered 503 may leave: nothing counted anywhere, but the
        session it reached may have been seen (idle expiry applied, idle clock refreshed)."""
        out = [self.copy()]
        if sid is not None and sid in self.sessions:
            seen = self.copy()
            sess = seen.sessions[sid]
            if sess.expired(seen.now_ms):
                sess.restart(seen.now_ms)
            sess.last_seen_ms = seen.now_ms
            out.append(seen)
        return out

    def advance(self, ms: int) -> State:
        st = self.copy()
        st.now_ms += ms
        return st
