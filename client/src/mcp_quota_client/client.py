"""Async HTTP client for `POST /v1/check`: pooled, one deadline per check, retries within
it, fail modes.

The deadline is the first link of the budget chain (docs/operations.md, "Deadlines"): the
service answers 503 within its store budget (about 2 s, at most about 3 s), well inside
the default 5 s here, so a hung store reaches this client as a 503 and the fail mode is
applied within the deadline, never after a timeout of its own."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType

import anyio
import httpx2

from mcp_quota_client.config import QuotaClientConfig
from mcp_quota_client.decision import (
    CheckRequest,
    Decision,
    FailMode,
    Outcome,
)
from mcp_quota_client.fail_modes import unavailable
from mcp_quota_client.hold import (
    REFUSED_LOCALLY_FIELD,
    HeldReport,
    RefusalHold,
)
from mcp_quota_client.leases import LeaseBook, LeaseReturn
from mcp_quota_client.transport import CheckTransport, Fault
from mcp_quota_client.wire import (
    APPROVAL_DENIED,
    APPROVAL_REQUIRED,
    CLIENT_FIELD,
    FAIL_OPEN_FIELD,
    LEASE_FIELD,
    approval_asked,
    int_or_none,
    json_object,
    monotonic_now,
    rejected_field,
)
from mcp_quota_client.wire_fields import OptionalFields

logger = logging.getLogger("mcp_quota_client")


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
        self._wire = CheckTransport(config, transport, jitter)
        self._sleep = sleep
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
        await self._wire.aclose()

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
            taken = int_or_none(json_object(response).get("returned"))
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
        deadline = monotonic_now() + self.config.deadline
        answered: Fault | None = None  # the last fault the service itself answered
        while True:
            attempts += 1
            started = monotonic_now()
            try:
                decision = await self._wire.attempt(
                    request, attempts, report, deadline - started, held
                )
            except Fault as fault:
                if fault.status is not None:
                    answered = fault
                # Another attempt only if it can take as long as this one did: a 503
                # that took the service's whole store budget is not asked again into a
                # deadline that would cut the next one off.
                took = monotonic_now() - started
                pause = self._wire.backoff(attempts) if fault.wait is None else fault.wait
                left = deadline - monotonic_now() - pause
                if fault.retryable and attempts < self.config.max_attempts and left >= took:
                    self._counts["retries"] += 1
                    await self._sleep(pause)
                    continue
                if fault.status is None and answered is not None:
                    fault = answered  # cut off by the deadline: report what was answered
                return self._unavailable(request, fault, attempts)
            if request.lease is not None and rejected_field(decision) == LEASE_FIELD:
                # A service from before leases: ask again without (a 400 counts nothing).
                self._leases = None
                request = replace(request, lease=None)
                logger.warning("mcp-quota: the quota service does not lease; one check per call")
                continue
            if report and rejected_field(decision) == FAIL_OPEN_FIELD:
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
            rejected = rejected_field(decision) or ""
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
            if held and rejected_field(decision) == REFUSED_LOCALLY_FIELD:
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

    def _record(self, decision: Decision) -> None:
        if decision.error_code in (APPROVAL_REQUIRED, APPROVAL_DENIED):
            # A call for a person to decide, not a fault of this server: refused.
            self._counts["refused"] += 1
            _log_approval(decision)
        elif decision.outcome is Outcome.REJECTED:
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

    def _unavailable(self, request: CheckRequest, fault: Fault, attempts: int) -> Decision:
        category = request.local_category()
        label, mode = category or "unknown", self.config.fail_mode_for(category)
        if mode is FailMode.OPEN:
            self._fail_open[label] += 1
            self._unreported[label] += 1
        else:
            self._fail_closed[label] += 1
        total = sum(self._fail_open.values())
        return unavailable(request, mode, fault.reason, fault.status, attempts, total)

    def _client(self) -> httpx2.AsyncClient:
        """The pooled HTTP client to the service (other requests than checks share it)."""
        return self._wire.client()


def _log_approval(decision: Decision) -> None:
    """A refusal for want of a person's approval, with where to give it, or a denial."""
    if decision.error_code == APPROVAL_DENIED:
        what, why = "denied", decision.message
    else:
        asked = approval_asked(decision)
        what = "required"
        why = (
            decision.message
            if asked is None
            else f"approve {asked.approval_id} at {asked.console_url}"
        )
    logger.warning(
        "mcp-quota: approval %s for tool %r in session %r: %s",
        what,
        decision.tool,
        decision.session_id,
        why,
    )
