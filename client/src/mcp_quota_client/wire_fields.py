"""Check-body fields a quota service from before them rejects (400 naming the field):
sent until one does, then left out for good, and the check asked again without."""

from __future__ import annotations

from dataclasses import replace

from mcp_quota_client.decision import CheckRequest

DROPPABLE: dict[str, object] = {
    "args_digest": None,  # the loop breaker's (issue 22)
    "mint_session": False,  # ask the service to mint a session (issue 31)
    "transport_session_id": None,  # the legacy transport session, shown (issue 31)
}
"""Each optional field, and what leaving it out sets it to. None changes what a service
without it counts: it loses the loop breaker, a minted session or a view's detail."""


class OptionalFields:
    """The optional fields this client still sends."""

    def __init__(self) -> None:
        self._dropped: dict[str, object] = {}

    def strip(self, request: CheckRequest) -> CheckRequest:
        """The request without the fields the service rejected before."""
        return replace(request, **self._dropped) if self._dropped else request  # type: ignore[arg-type]

    def rejected(self, request: CheckRequest, field: str | None) -> CheckRequest | None:
        """The request to send again when the service rejected `field`, one of these and
        sent; None when it is not (the rejection stands)."""
        if field is None or field not in DROPPABLE or field in self._dropped:
            return None
        if getattr(request, field) == DROPPABLE[field]:
            return None  # not sent: what the service rejected is something else
        self._dropped[field] = DROPPABLE[field]
        return self.strip(request)
