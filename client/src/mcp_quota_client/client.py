"""Async HTTP client for `POST /v1/check`: pooled, one deadline per check, retries within
it, fail modes.

The deadline is the first link of the budget chain (docs/operations.md, "Deadlines"): the
service answers 503 within its store budget (about 2 s, at most about 3 s), well inside
the default 5 s here, so a hung store reaches this client as a 503 and the fail mode is
applied within the deadline, never after a timeout of its own."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType, TracebackType
from typing import Any

import anyio
import httpx2

from mcp_quota_client.decision import (
    READ,
    WRITE,
    CheckRequest,
    Decision,
    FailMode,
    Outcome,
    ShadowNotice,
)
from mcp_quota_client.hold import (
    DEFAULT_HOLD_CALLS,
    MAX_HOLD_SECONDS,
    REFUSED_LOCALLY_FIELD,
    HeldReport,
    RefusalHold,
    report_body,
)
from mcp_quota_client.leases import LeaseBook, LeaseReturn
from mcp_quota_client.wire_fields import OptionalFields

logger = logging.getLogger("mcp_quota_client")

DEFAULT_FAIL_MODES: Mapping[str, FailMode] = MappingProxyType(
    {READ: FailMode.OPEN, WRITE: FailMode.CLOSED}
)
"""Reads keep working through an outage; writes (and anything unknown) are refused."""

_REQUIRED = {
    "MCP_QUOTA_URL": "the quota service's base URL, e.g. http://127.0.0.1:8000 for `make run`",
    "MCP_QUOTA_TOKEN": "a bearer token with role `server` (dev-server-token for `make run`)",
}

_TOKEN_REFUSED = {
    401: "the quota service got no usable token from this server (401): check MCP_QUOTA_TOKEN",
    403: "the quota service refused this server's token (403): check MCP_QUOTA_TOKEN",
}

FAIL_OPEN_FIELD = "fail_open"
"""Check-body field reporting the calls that ran uncounted since the last answered check."""
LEASE_FIELD = "lease"
"""Check-body field asking for calls reserved at once (leased reads)."""
CLIENT_FIELD = "client"
"""Check-body field naming the MCP client (name, version, OAuth client id)."""
_OFF = frozenset({"off", "0", "false", "no"})
CALL_IN_PROGRESS = "call_in_progress"
"""409 code: a copy of this call (same call id) is still being counted; ask again."""
CALL_ID_CONFLICT = "call_id_conflict"
AGENT_CAUSED = frozenset(
    {
        CALL_ID_CONFLICT,
        "session_token_invalid",
        "session_token_other_principal",
        "approval_required",
        "approval_denied",
    }
)
"""Rejections the agent's call caused (an id reused, a session token echoed wrong, a call
that needs a human's approval): the service's words say what to do; it is no
configuration problem of the server."""
"""409 code: the call id names another call (tool, arguments or principal)."""


class QuotaConfigError(ValueError):
    """The client is not configured: the message is one line that says what to set."""


_BLOCKED_CODES = {
    "quota_exceeded": Outcome.QUOTA_EXCEEDED,
    "session_suspended": Outcome.SESSION_SUSPENDED,
    "principal_suspended": Outcome.PRINCIPAL_SUSPENDED,
    "repeated_call": Outcome.REPEATED_CALL,
}


@dataclass(frozen=True, kw_only=True)
class QuotaClientConfig:
    """Where the quota service is and how patiently to ask it."""

    base_url: str
    token: str
    deadline: float = 5.0
    """Seconds one check may take in all, retries included; then the fail mode applies.
    Longer than the service's store budget (docs/operations.md), so it sees the 503."""
    connect_timeout: float = 1.0
    read_timeout: float = 5.0
    """Cap of one attempt; each attempt also stops at the deadline."""
    max_attempts: int = 3
    """Tries per check, counting the first, within the deadline. Connection errors,
    timeouts, any 5xx and a 429 without a decision (the gateway's throttle) retry."""
    backoff_base: float = 0.05
    backoff_max: float = 0.5
    fail_modes: Mapping[str, FailMode] = field(default_factory=lambda: dict(DEFAULT_FAIL_MODES))
    default_fail_mode: FailMode = FailMode.CLOSED
    """For a category not named in `fail_modes`: unknown means refuse."""
    lease: bool = True
    """Ask for leased reads: one check reserves several calls of a category the service
    leases (reads by default), spent here without asking."""
    lease_idle_seconds: float = 30.0
    """A session's lease unused this long goes back to the service (checked at each call)."""
    lease_margin_seconds: float = 1.0
    """Stop spending a lease this long before the service's `lease_seconds` run out."""
    hold_seconds: float = MAX_HOLD_SECONDS
    """After a refusal with nothing left, refuse the session's further calls of that
    category here for this long (at most 5 s, never past Retry-After); 0 turns it off."""
    hold_calls: int = DEFAULT_HOLD_CALLS
    """At most this many calls refused here per hold: the service then sees the next
    one, with the count (`refused_locally`), so escalation is never later than that."""

    def __post_init__(self) -> None:
        if not self.base_url:
            raise QuotaConfigError("mcp-quota: base_url is required")
        if not self.token:
            raise QuotaConfigError("mcp-quota: token is required")
        if self.max_attempts < 1:
            raise QuotaConfigError("mcp-quota: max_attempts must be at least 1")
        if self.deadline <= 0 or self.read_timeout <= 0 or self.connect_timeout <= 0:
            raise QuotaConfigError("mcp-quota: deadline and timeouts must be positive")
        if self.lease_idle_seconds <= 0 or self.lease_margin_seconds < 0:
            raise QuotaConfigError("mcp-quota: lease_idle_seconds must be positive")
        if not 0 <= self.hold_seconds <= MAX_HOLD_SECONDS or self.hold_calls < 1:
            raise QuotaConfigError(
                f"mcp-quota: hold_seconds must be from 0 to {MAX_HOLD_SECONDS:g} and "
                "hold_calls at least 1"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> QuotaClientConfig:
        """Read `MCP_QUOTA_URL`, `MCP_QUOTA_TOKEN` and the optional tuning variables.

        `MCP_QUOTA_FAIL_OPEN` / `MCP_QUOTA_FAIL_CLOSED` are comma-separated
        categories that override the defaults (read open, write closed).
        `MCP_QUOTA_LEASE=off` turns leased reads off; `MCP_QUOTA_LEASE_IDLE_SECONDS` sets
        how long an unused lease is kept before its calls go back.
        `MCP_QUOTA_DEADLINE` is the seconds a check may take in all, retries included.
        `MCP_QUOTA_HOLD_SECONDS` (0 to 5, 0: off) and `MCP_QUOTA_HOLD_CALLS` set the
        local refusal hold.

        Raises:
            QuotaConfigError: a required variable is missing or a number is malformed.
        """
        env = os.environ if environ is None else environ
        for variable, meaning in _REQUIRED.items():
            if not env.get(variable, "").strip():
                raise QuotaConfigError(f"mcp-quota: {variable} is not set: set it to {meaning}")
        base_url = env["MCP_QUOTA_URL"].strip()
        token = env["MCP_QUOTA_TOKEN"].strip()
        modes: dict[str, FailMode] = dict(DEFAULT_FAIL_MODES)
        for variable, mode in (
            ("MCP_QUOTA_FAIL_OPEN", FailMode.OPEN),
            ("MCP_QUOTA_FAIL_CLOSED", FailMode.CLOSED),
        ):
            for category in env.get(variable, "").split(","):
                if category.strip():
                    modes[category.strip()] = mode
        try:
            connect_timeout = float(env.get("MCP_QUOTA_CONNECT_TIMEOUT", "1.0"))
            read_timeout = float(env.get("MCP_QUOTA_READ_TIMEOUT", "5.0"))
            deadline = float(env.get("MCP_QUOTA_DEADLINE", "5.0"))
            max_attempts = int(env.get("MCP_QUOTA_MAX_ATTEMPTS", "3"))
            lease_idle = float(env.get("MCP_QUOTA_LEASE_IDLE_SECONDS", "30"))
            hold_seconds = float(env.get("MCP_QUOTA_HOLD_SECONDS", str(MAX_HOLD_SECONDS)))
            hold_calls = int(env.get("MCP_QUOTA_HOLD_CALLS", str(DEFAULT_HOLD_CALLS)))
        except ValueError as exc:
            raise QuotaConfigError(f"mcp-quota: a MCP_QUOTA_* number is malformed: {exc}") from exc
        return cls(
            base_url=base_url,
            token=token,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            deadline=deadline,
            max_attempts=max_attempts,
            fail_modes=modes,
            lease=env.get("MCP_QUOTA_LEASE", "on").strip().lower() not in _OFF,
            lease_idle_seconds=lease_idle,
            hold_seconds=hold_seconds,
            hold_calls=hold_calls,
        )

    def fail_mode_for(self, category: str | None) -> FailMode:
        """The configured fail mode for a category, or the default for an unknown one."""
        if category is None:
            return self.default_fail_mode
        return self.fail_modes.get(category, self.default_fail_mode)


@dataclass(frozen=True)
class ClientStats:
    """A snapshot of what the client has decided since it started."""

    checks: int
    allowed: int
    refused: int
    duplicates: int
    retries: int
    rejected: int
    fail_open: Mapping[str, int]
    fail_closed: Mapping[str, int]
    fail_open_unreported: Mapping[str, int] = field(default_factory=dict)
    """Fail-open calls not yet reported to the service (sent with the next check)."""
    leased: int = 0
    """Calls allowed here from a lease, without a request (included in `allowed`)."""
    lease_returned: int = 0
    """Unspent leased calls the service took back."""
    lease_unspent: int = 0
    """Calls held in leases now, not yet spent."""
    refused_locally: int = 0
    """Calls refused here during a refusal's hold, without a request (in `refused`)."""
    refused_locally_unreported: int = 0
    """Of those, the ones not yet reported to the service (sent with the session's next
    check)."""

    @property
    def fail_open_total(self) -> int:
        """Every call that ran uncounted because the service was unavailable."""
        return sum(self.fail_open.values())


class _Fault(Exception):
    """The service could not give a decision this attempt (internal to the retry loop)."""

    def __init__(
        self,
        reason: str,
        *,
        retryable: bool,
        status: int | None = None,
        wait: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.status = status
        self.wait = wait  # the service's Retry-After, if it asked for a pause


class QuotaClient:
    """Asks the quota service whether a tool call may run.

    Create one per process and share it: it keeps one pooled HTTP connection
    set. `check` never raises for an outage or a refusal; both come back as a
    `Decision`.
    """

    def __init__(
        self,
        config: QuotaClientConfig,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        jitter: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._transport = transport
        self._jitter = jitter
        self._sleep = sleep
        self._http: httpx2.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._counts: Counter[str] = Counter()
        self._fail_open: Counter[str] = Counter()
        self._fail_closed: Counter[str] = Counter()
        self._unreported: Counter[str] = Counter()
        self._reports_accepted = True
        self._clients_accepted = True
        self._optional = OptionalFields()
        self._leases: LeaseBook | None = (
            LeaseBook(clock, config.lease_idle_seconds, config.lease_margin_seconds)
            if config.lease
            else None
        )
        self._returning: set[asyncio.Task[None]] = set()
        self._hold: RefusalHold | None = (
            RefusalHold(clock, config.hold_seconds, config.hold_calls)
            if config.hold_seconds > 0
            else None
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> QuotaClient:
        """A client configured from `MCP_QUOTA_*` environment variables.

        Raises:
            QuotaConfigError: a required variable is missing or malformed.
        """
        return cls(QuotaClientConfig.from_env(environ))

    async def __aenter__(self) -> QuotaClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Give back every unspent leased call (best effort, never raising), then close
        the pooled connections."""
        if self._leases is not None:
            for returned in self._leases.drain():
                self._give_back(returned)
        pending = [t for t in self._returning if not t.done()]
        if pending:
            try:
                await asyncio.wait(pending, timeout=self.config.read_timeout)
            except Exception:  # a task of another event loop: its return is lost
                logger.debug("mcp-quota: lease returns not awaited", exc_info=True)
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    def stats(self) -> ClientStats:
        """Counts of decisions so far, including every fail-open call."""
        return ClientStats(
            checks=self._counts["checks"],
            allowed=self._counts["allowed"],
            refused=self._counts["refused"],
            duplicates=self._counts["duplicates"],
            retries=self._counts["retries"],
            rejected=self._counts["rejected"],
            fail_open=dict(self._fail_open),
            fail_closed=dict(self._fail_closed),
            fail_open_unreported=dict(self._unreported),
            leased=self._counts["leased"],
            lease_returned=self._counts["lease_returned"],
            lease_unspent=self._leases.unspent() if self._leases else 0,
            refused_locally=self._counts["refused_locally"],
            refused_locally_unreported=self._hold.unreported() if self._hold else 0,
        )

    async def check(self, request: CheckRequest) -> Decision:
        """Count one tool call; return whether it may run.

        The same `call_id` is sent on every retry, so a retried check is counted
        once. Without one, a fresh id is generated for this call. Fail-open calls not
        yet reported go with it (`fail_open`), and count as reported once the service
        has answered it. During a refusal's hold, the session's calls in the refused
        category are refused here, and reported with its next check (`refused_locally`).
        """
        hold = self._hold
        held = hold.refuse(request) if hold is not None else None
        if held is not None:
            self._counts["refused"] += 1
            self._counts["refused_locally"] += 1
            return held
        leases = self._leases
        if leases is not None and request.units == 1:  # a weighed call is never leased
            for returned in leases.due():
                self._give_back(returned)
            local = leases.take(request)
            if local is not None:
                self._counts["allowed"] += 1
                self._counts["leased"] += 1
                return local
            request = replace(request, lease=leases.size(request))
        if request.call_id is None:
            request = replace(request, call_id=f"gen-{uuid.uuid4().hex}")
        if not self._clients_accepted:
            request = replace(request, client=None)
        request = self._optional.strip(request)
        self._counts["checks"] += 1
        # The report is taken out while this check carries it, so that concurrent checks
        # never report the same calls twice; it goes back unless the service answered.
        report: Counter[str] = Counter()
        if self._reports_accepted:
            report, self._unreported = self._unreported, Counter()
        refused_here = hold.report(request.session_id) if hold is not None else {}
        try:
            decision = await self._decide(request, report, refused_here)
        finally:
            if report:
                self._unreported.update(report)
            if refused_here and self._hold is not None:
                self._hold.restore(request.session_id, refused_here)
        self._learn(request, decision)
        return decision

    def _learn(self, request: CheckRequest, decision: Decision) -> None:
        """What an answer teaches the hold and the leases; a shadowed call is logged."""
        if self._hold is not None:
            self._hold.learn(request, decision)
        if decision.shadow is not None:
            logger.warning(
                "mcp-quota: SHADOW tool=%s session=%s: would have refused (%s, %s): %s",
                request.tool,
                request.session_id,
                decision.shadow.code,
                decision.shadow.scope,
                decision.shadow.message,
            )
        if self._leases is not None:
            for returned in self._leases.learn(request, decision):
                self._give_back(returned)

    def _give_back(self, returned: LeaseReturn) -> None:
        """Send unspent leased calls back in the background; best effort."""
        try:
            task = asyncio.get_running_loop().create_task(self._return_lease(returned))
        except RuntimeError:  # no running loop: nothing can be sent
            return
        self._returning.add(task)
        task.add_done_callback(self._returning.discard)

    async def _return_lease(self, returned: LeaseReturn) -> None:
        body = {
            "session_id": returned.session_id,
            "lease": returned.lease_id,
            "unused": returned.unused,
        }
        try:
            response = await self._client().post("/v1/leases/return", json=body)
        except Exception as exc:  # best effort: the calls stay counted, the safe side
            logger.info("mcp-quota: lease return failed (%s); calls stay counted", exc)
            return
        if response.status_code == 200:
            taken = _int_or_none(_json_object(response).get("returned"))
            self._counts["lease_returned"] += taken or 0
        else:
            logger.info("mcp-quota: lease return answered %s", response.status_code)

    async def _decide(
        self,
        request: CheckRequest,
        report: Counter[str],
        held: dict[str, HeldReport] | None = None,
    ) -> Decision:
        attempts = 0
        deadline = _now() + self.config.deadline
        answered: _Fault | None = None  # the last fault the service itself answered
        while True:
            attempts += 1
            started = _now()
            try:
                decision = await self._attempt(request, attempts, report, deadline - started, held)
            except _Fault as fault:
                if fault.status is not None:
                    answered = fault
                # Another attempt only if it can take as long as this one did: a 503
                # that took the service's whole store budget is not asked again into a
                # deadline that would cut the next one off.
                took = _now() - started
                pause = self._backoff(attempts) if fault.wait is None else fault.wait
                left = deadline - _now() - pause
                if fault.retryable and attempts < self.config.max_attempts and left >= took:
                    self._counts["retries"] += 1
                    await self._sleep(pause)
                    continue
                if fault.status is None and answered is not None:
                    fault = answered  # cut off by the deadline: report what was answered
                return self._unavailable(request, fault, attempts)
            if request.lease is not None and _rejected_field(decision) == LEASE_FIELD:
                # A service from before leases: ask again without (a 400 counts nothing).
                self._leases = None
                request = replace(request, lease=None)
                logger.warning("mcp-quota: the quota service does not lease; one check per call")
                continue
            if report and _rejected_field(decision) == FAIL_OPEN_FIELD:
                # A service from before the field: ask again without it (a 400 counts
                # nothing), and keep the counts here, in stats().
                self._reports_accepted = False
                self._unreported.update(report)
                report.clear()
                logger.warning(
                    "mcp-quota: the quota service does not accept fail-open reports; "
                    "fail-open calls are counted in this server's stats() only"
                )
                continue
            rejected = _rejected_field(decision) or ""
            without = self._optional.rejected(request, rejected)
            if without is not None:  # a service from before the field: ask again without
                request = without
                continue
            if request.client is not None and rejected.split(".")[0] == CLIENT_FIELD:
                # Who the client is only informs the administrator: never a reason to
                # refuse a call. A service from before the field stops getting it.
                self._clients_accepted = rejected != CLIENT_FIELD
                request = replace(request, client=None)
                continue
            if held and _rejected_field(decision) == REFUSED_LOCALLY_FIELD:
                # A service from before the hold cannot count what it refuses here: stop
                # holding (every call is asked again), and ask this one again without.
                self._hold = None
                held.clear()
                logger.warning("mcp-quota: the quota service does not take local refusals")
                continue
            if decision.from_service:
                report.clear()  # reported: the service answered the check that carried it
                if held:
                    held.clear()
            self._record(decision)
            return decision

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.config.backoff_max, self.config.backoff_base * 2.0 ** (attempt - 1))
        return self._jitter() * ceiling

    def _client(self) -> httpx2.AsyncClient:
        # An AsyncClient's pool belongs to the event loop that opened it; a server
        # normally has one loop, but tests and scripts may run several in turn.
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop:
            self._http = httpx2.AsyncClient(
                base_url=self.config.base_url.rstrip("/"),
                headers={"Authorization": f"Bearer {self.config.token}"},
                timeout=httpx2.Timeout(
                    connect=self.config.connect_timeout,
                    read=self.config.read_timeout,
                    write=self.config.read_timeout,
                    pool=self.config.connect_timeout,
                ),
                limits=httpx2.Limits(max_connections=64, max_keepalive_connections=16),
                transport=self._transport,
            )
            self._http_loop = loop
        return self._http

    async def _attempt(
        self,
        request: CheckRequest,
        attempt: int,
        report: Mapping[str, int],
        left: float,
        held: Mapping[str, HeldReport] | None = None,
    ) -> Decision:
        body = request.to_json()
        if report:
            body[FAIL_OPEN_FIELD] = dict(report)
        if held:
            body[REFUSED_LOCALLY_FIELD] = report_body(held)
        if left <= 0:
            raise _Fault("did not answer within the deadline", retryable=False)
        read = min(self.config.read_timeout, left)
        timeout = httpx2.Timeout(
            connect=min(self.config.connect_timeout, left), read=read, write=read, pool=read
        )
        try:
            response = await self._client().post("/v1/check", json=body, timeout=timeout)
        except httpx2.TimeoutException as exc:
            raise _Fault(f"did not answer in time ({type(exc).__name__})", retryable=True) from exc
        except httpx2.TransportError as exc:
            raise _Fault(f"could not be reached ({type(exc).__name__})", retryable=True) from exc
        status = response.status_code
        if status >= 500:
            # The service's 503 (store down), or the gateway's 5xx (a Lambda throttle or
            # timeout): transient, and the call id makes a retry count once.
            raise _Fault(f"answered {status}", retryable=True, status=status)
        body = _json_object(response)
        if status == 429 and "allowed" not in body:
            # The gateway's throttle, not a quota refusal: nothing was counted.
            raise _Fault("was throttled (429 from the gateway)", retryable=True, status=status)
        if status in (200, 429):
            decision = _service_decision(request, status, response.headers, body, attempt)
            if decision is None:
                raise _Fault(f"answered {status} with an unreadable body", retryable=False)
            return decision
        if status == 409 and _error_code(body) == CALL_IN_PROGRESS:
            # Another request of this very call is still being counted: ask again when it
            # has been decided (a duplicate of it if allowed, counted anew if refused).
            wait = float(_retry_after(response.headers, body) or 1)
            raise _Fault("is still counting this call", retryable=True, status=status, wait=wait)
        return _rejected(request, status, body, attempt)

    def _record(self, decision: Decision) -> None:
        if decision.outcome is Outcome.REJECTED:
            self._counts["rejected"] += 1
            logger.error(
                "mcp-quota: check rejected (%s) for tool %r in session %r: %s",
                decision.http_status,
                decision.tool,
                decision.session_id,
                decision.message,
            )
        elif decision.allowed:
            self._counts["allowed"] += 1
            if decision.duplicate:
                self._counts["duplicates"] += 1
        else:
            self._counts["refused"] += 1

    def _unavailable(self, request: CheckRequest, fault: _Fault, attempts: int) -> Decision:
        category = request.local_category()
        mode = self.config.fail_mode_for(category)
        label = category or "unknown"
        if mode is FailMode.OPEN:
            self._fail_open[label] += 1
            self._unreported[label] += 1
            message = (
                f"The quota service {fault.reason} after {attempts} attempt(s); the tool "
                f"'{request.tool}' ran without being counted because category '{label}' "
                "fails open."
            )
            logger.warning(
                "mcp-quota: FAIL-OPEN tool=%s category=%s session=%s reason=%s attempts=%d "
                "fail_open_total=%d",
                request.tool,
                label,
                request.session_id,
                fault.reason,
                attempts,
                sum(self._fail_open.values()),
            )
            outcome = Outcome.FAIL_OPEN
        else:
            self._fail_closed[label] += 1
            message = (
                f"The quota service {fault.reason} after {attempts} attempt(s), so the tool "
                f"'{request.tool}' was NOT run: calls in category '{label}' are refused "
                "while the quota cannot be checked. Try again in a moment; read-only tools "
                "may still work. If this persists, an administrator should check the quota "
                "service."
            )
            logger.error(
                "mcp-quota: FAIL-CLOSED tool=%s category=%s session=%s reason=%s attempts=%d",
                request.tool,
                label,
                request.session_id,
                fault.reason,
                attempts,
            )
            outcome = Outcome.FAIL_CLOSED
        return Decision(
            allowed=mode is FailMode.OPEN,
            outcome=outcome,
            session_id=request.session_id,
            tool=request.tool,
            category=category,
            message=message,
            error_code="quota_service_unavailable",
            http_status=fault.status,
            attempts=attempts,
        )


def _now() -> float:
    # Deadlines are real time: the HTTP timeouts they cap are, whatever clock leases use.
    return time.monotonic()


def _json_object(response: httpx2.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _retry_after(headers: httpx2.Headers, body: Mapping[str, Any]) -> int | None:
    from_body = _int_or_none(body.get("retry_after_seconds"))
    if from_body is not None:
        return from_body
    header = headers.get("retry-after")
    if header is not None and header.strip().isdigit():
        return int(header.strip())
    return None


def _service_decision(
    request: CheckRequest,
    status: int,
    headers: httpx2.Headers,
    body: Mapping[str, Any],
    attempt: int,
) -> Decision | None:
    allowed = body.get("allowed")
    if not isinstance(allowed, bool) or allowed != (status == 200):
        return None
    error = body.get("error")
    error = error if isinstance(error, Mapping) else {}
    code = _str_or_none(error.get("code"))
    category = _str_or_none(body.get("category"))
    used = _int_or_none(body.get("used"))
    limit = _int_or_none(body.get("limit"))
    resets_at = _parse_time(body.get("resets_at"))
    if allowed:
        outcome = Outcome.ALLOWED
        message = f"Allowed: {used}/{limit} {category} calls used in session {request.session_id}."
        retry_after = None
    else:
        outcome = _BLOCKED_CODES.get(code or "", Outcome.QUOTA_EXCEEDED)
        retry_after = _retry_after(headers, body)
        message = _str_or_none(error.get("message")) or (
            f"The {category} quota for session {request.session_id} is used up ({used}/{limit}); "
            f"the tool '{request.tool}' was NOT run. An administrator can raise the quota."
        )
    return Decision(
        allowed=allowed,
        outcome=outcome,
        session_id=_str_or_none(body.get("session_id")) or request.session_id,
        tool=_str_or_none(body.get("tool")) or request.tool,
        message=message,
        category=category,
        used=used,
        limit=limit,
        remaining=_int_or_none(body.get("remaining")),
        resets_at=resets_at,
        retry_after_seconds=retry_after,
        duplicate=body.get("duplicate") is True,
        error_code=code,
        scope=_str_or_none(error.get("scope")),
        http_status=status,
        attempts=attempt,
        shadow=_shadow(body.get("shadow")) if allowed else None,
        hold_ticket=None if allowed else _str_or_none(body.get("hold_ticket")),
        raw=dict(body),
    )


def _shadow(value: object) -> ShadowNotice | None:
    """The `shadow` of an allowed answer: what the refusal would have said."""
    if not isinstance(value, Mapping):
        return None
    code, scope, message = (_str_or_none(value.get(k)) for k in ("code", "scope", "message"))
    if code is None or message is None:
        return None
    return ShadowNotice(code, scope or "session", message)


def _rejected_field(decision: Decision) -> str | None:
    """The request field a rejected check names, if any."""
    if decision.outcome is not Outcome.REJECTED:
        return None
    error = decision.raw.get("error")
    return _str_or_none(error.get("field")) if isinstance(error, Mapping) else None


def _error_code(body: Mapping[str, Any]) -> str | None:
    error = body.get("error")
    return _str_or_none(error.get("code")) if isinstance(error, Mapping) else None


def _rejected(
    request: CheckRequest, status: int, body: Mapping[str, Any], attempt: int
) -> Decision:
    error = body.get("error")
    error = error if isinstance(error, Mapping) else {}
    code = _str_or_none(error.get("code")) or f"http_{status}"
    field_name = _str_or_none(error.get("field"))
    token_problem = _TOKEN_REFUSED.get(status)
    if token_problem is not None:
        # The service's own words for a bad token are a gateway's ("Unauthorized"); what
        # the reader needs is which setting to fix.
        problem = token_problem
    else:
        where = f" (field '{field_name}')" if field_name else ""
        detail = _str_or_none(error.get("message")) or "no detail given"
        problem = f"the quota service rejected the check with {status} {code}{where}: {detail}"
    if code in AGENT_CAUSED:
        # The agent's doing, not the server's configuration: the service's words say what.
        message = _str_or_none(error.get("message")) or f"The tool '{request.tool}' was NOT run."
    else:
        message = (
            f"The tool '{request.tool}' was NOT run: {problem}. This is a configuration "
            "problem in the MCP server, not a used-up quota; an administrator must fix it."
        )
    return Decision(
        allowed=False,
        outcome=Outcome.REJECTED,
        session_id=request.session_id,
        tool=request.tool,
        category=request.category,
        message=message,
        error_code=code,
        scope=_str_or_none(error.get("scope")),
        http_status=status,
        attempts=attempt,
        raw=dict(body),
    )
