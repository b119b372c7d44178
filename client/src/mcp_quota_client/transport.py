"""The transport of a check: one pooled HTTP client per event loop, one attempt of
`POST /v1/check` within the time left, and the backoff between attempts. What an
attempt that got no decision means is a `Fault`; the retry loop and the fail modes are
`QuotaClient`'s."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import httpx2

from mcp_quota_client.config import QuotaClientConfig
from mcp_quota_client.decision import CheckRequest, Decision
from mcp_quota_client.hold import REFUSED_LOCALLY_FIELD, HeldReport, report_body
from mcp_quota_client.wire import (
    CALL_IN_PROGRESS,
    FAIL_OPEN_FIELD,
    error_code,
    json_object,
    rejected,
    retry_after_of,
    service_decision,
)


class Fault(Exception):
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


class CheckTransport:
    """Sends checks to the quota service over one pooled connection set."""

    def __init__(
        self,
        config: QuotaClientConfig,
        transport: httpx2.AsyncBaseTransport | None,
        jitter: Callable[[], float],
    ) -> None:
        self.config = config
        self._transport = transport
        self._jitter = jitter
        self._http: httpx2.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None

    async def aclose(self) -> None:
        """Close the pooled connections (a later check opens new ones)."""
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()

    def backoff(self, attempt: int) -> float:
        ceiling = min(self.config.backoff_max, self.config.backoff_base * 2.0 ** (attempt - 1))
        return self._jitter() * ceiling

    def client(self) -> httpx2.AsyncClient:
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

    async def attempt(
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
            raise Fault("did not answer within the deadline", retryable=False)
        read = min(self.config.read_timeout, left)
        timeout = httpx2.Timeout(
            connect=min(self.config.connect_timeout, left), read=read, write=read, pool=read
        )
        try:
            response = await self.client().post("/v1/check", json=body, timeout=timeout)
        except httpx2.TimeoutException as exc:
            raise Fault(f"did not answer in time ({type(exc).__name__})", retryable=True) from exc
        except httpx2.TransportError as exc:
            raise Fault(f"could not be reached ({type(exc).__name__})", retryable=True) from exc
        status = response.status_code
        if status >= 500:
            # The service's 503 (store down), or the gateway's 5xx (a Lambda throttle or
            # timeout): transient, and the call id makes a retry count once.
            raise Fault(f"answered {status}", retryable=True, status=status)
        body = json_object(response)
        if status == 429 and "allowed" not in body:
            # The gateway's throttle, not a quota refusal: nothing was counted.
            raise Fault("was throttled (429 from the gateway)", retryable=True, status=status)
        if status in (200, 429):
            decision = service_decision(request, status, response.headers, body, attempt)
            if decision is None:
                raise Fault(f"answered {status} with an unreadable body", retryable=False)
            return decision
        if status == 409 and error_code(body) == CALL_IN_PROGRESS:
            # Another request of this very call is still being counted: ask again when it
            # has been decided (a duplicate of it if allowed, counted anew if refused).
            wait = float(retry_after_of(response.headers, body) or 1)
            raise Fault("is still counting this call", retryable=True, status=status, wait=wait)
        return rejected(request, status, body, attempt)
