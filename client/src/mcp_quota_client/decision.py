"""The request sent to `/v1/check` and the decision that comes back, as plain values."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, TypedDict


class Outcome(StrEnum):
    """Why a decision allows or refuses a tool call."""

    ALLOWED = "allowed"
    """The service counted the call and it is within the budget."""
    QUOTA_EXCEEDED = "quota_exceeded"
    """The service refused: the session used its budget for the category."""
    SESSION_SUSPENDED = "session_suspended"
    """The service refused: an administrator suspended the session."""
    PRINCIPAL_SUSPENDED = "principal_suspended"
    """The service refused: the principal is suspended (by an administrator, or for
    ignoring refusals), in every session."""
    REPEATED_CALL = "repeated_call"
    """The service refused: the session called this tool with the same arguments as often
    as the category's `repeat` limit allows in its window (the loop breaker)."""
    FAIL_OPEN = "fail_open"
    """The service could not be asked; the category fails open, so the call runs uncounted."""
    FAIL_CLOSED = "fail_closed"
    """The service could not be asked; the category fails closed, so the call is refused."""
    REJECTED = "rejected"
    """The service rejected the check itself (bad token, bad input): a configuration fault."""


class FailMode(StrEnum):
    """What to do with a category's calls when the quota service cannot answer."""

    OPEN = "open"
    CLOSED = "closed"


class ToolAnnotations(TypedDict, total=False):
    """The MCP tool annotations the service accepts, under their wire names."""

    readOnlyHint: bool
    destructiveHint: bool
    idempotentHint: bool
    openWorldHint: bool
    title: str


READ = "read"
WRITE = "write"


CLIENT_FIELD_LIMITS = {"name": 128, "version": 64, "oauth_client_id": 256}
"""The longest each part of the check's `client` object may be (the service's limits)."""


def _showable(value: str | None, longest: int) -> str | None:
    """`value` without control or format characters (the service refuses them), trimmed
    and cut to `longest`; None when nothing is left."""
    if value is None:
        return None
    kept = "".join(c for c in value if not unicodedata.category(c).startswith("C")).strip()
    return kept[:longest] or None


@dataclass(frozen=True, kw_only=True)
class ClientInfo:
    """The MCP client an agent runs in: shown to administrators with its session."""

    name: str | None = None
    """From the `initialize` request's clientInfo, or the request's `_meta`."""
    version: str | None = None
    oauth_client_id: str | None = None
    """The OAuth client the server authenticated, when it uses auth."""

    def to_json(self) -> dict[str, str]:
        """The check's `client` object: the known parts, made acceptable to the service
        (an unusual client name never makes a check invalid)."""
        parts = {
            "name": self.name,
            "version": self.version,
            "oauth_client_id": self.oauth_client_id,
        }
        shown = {k: _showable(v, CLIENT_FIELD_LIMITS[k]) for k, v in parts.items()}
        return {k: v for k, v in shown.items() if v is not None}


@dataclass(frozen=True, kw_only=True)
class CheckRequest:
    """One tool call to be counted against a session's budget."""

    session_id: str
    tool: str
    category: str | None = None
    annotations: ToolAnnotations | None = None
    principal: str | None = None
    call_id: str | None = None
    lease: int | None = None
    """Calls to reserve at once, this one included. Leave it None: `QuotaClient` sets it
    for leased reads and spends what the service grants."""
    server: str | None = None
    """The MCP server's name, shown with the session in every administrator's view."""
    units: int = 1
    """What the call weighs (1-1000): counted at every scope all or nothing, e.g. the
    number of items a bulk tool touches."""
    args_digest: str | None = None
    """SHA-256 (hex) of the tool's arguments as canonical JSON: the arguments themselves
    never leave the server. For the loop breaker; ignored by services without it."""
    client: ClientInfo | None = None
    """The MCP client (name, version, OAuth client id), where the server knows it."""
    session_token: str | None = None
    """A session the service minted, echoed by the MCP client: the service verifies it
    and counts the call in its session (else refuses with a 4xx naming the problem)."""
    mint_session: bool = False
    """No session was named: `session_id` is what this side derived, and the service
    answers a session (`Decision.session_token`) for the MCP client to echo back."""
    transport_session_id: str | None = None
    """The legacy `Mcp-Session-Id` the call came over: shown with the call, no budget."""
    arguments_preview: str | None = None
    """The arguments as JSON, for a tool whose calls need an approval only: shown to
    the approver, never used to decide."""

    def to_json(self) -> dict[str, Any]:
        """The `/v1/check` body: absent optional fields are omitted, never sent as null."""
        client = self.client.to_json() if self.client is not None else {}
        optional: dict[str, Any] = {
            "category": self.category,
            "annotations": dict(self.annotations) if self.annotations else None,
            "principal": self.principal,
            "server": self.server,
            "call_id": self.call_id,
            "lease": self.lease,
            "units": self.units if self.units != 1 else None,
            "args_digest": self.args_digest,
            "client": client or None,
            "session_token": self.session_token,
            "mint_session": True if self.mint_session else None,
            "transport_session_id": self.transport_session_id,
            "arguments_preview": self.arguments_preview,
        }
        body: dict[str, Any] = {"session_id": self.session_id, "tool": self.tool}
        return body | {k: v for k, v in optional.items() if v is not None}

    def local_category(self) -> str | None:
        """The category this call most likely falls in, for choosing a fail mode offline.

        Mirrors the service's default classification (explicit category, then
        `readOnlyHint: true` -> read, anything else -> write). A policy rule on the
        service may classify differently; offline, the client can only guess.
        """
        if self.category is not None:
            return self.category
        if self.annotations is not None and self.annotations.get("readOnlyHint") is True:
            return READ
        return WRITE


@dataclass(frozen=True)
class ShadowNotice:
    """What the refusal would have said, under a policy's `"enforce": false`."""

    code: str
    scope: str
    message: str

    def to_json(self) -> dict[str, str]:
        """The notice as the service sends it (and as `_meta` carries it)."""
        return {"code": self.code, "scope": self.scope, "message": self.message}


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The answer for one tool call. A refusal is a value, not an exception."""

    allowed: bool
    outcome: Outcome
    session_id: str
    tool: str
    message: str
    category: str | None = None
    used: int | None = None
    limit: int | None = None
    remaining: int | None = None
    resets_at: datetime | None = None
    retry_after_seconds: int | None = None
    duplicate: bool = False
    error_code: str | None = None
    scope: str | None = None
    """The budget that refused the call: session, principal or tenant."""
    http_status: int | None = None
    attempts: int = 1
    from_lease: bool = False
    """Allowed here, with no request, from calls the service counted earlier in a lease;
    `used`, `limit` and `remaining` are those of the answer that granted the lease."""
    refused_locally: bool = False
    """Refused here, with no request, during the hold after the service refused this
    session and category; the message is the service's refusal's."""
    shadow: ShadowNotice | None = None
    """Shadow mode: the call is allowed, but an enforcing policy would have refused it."""
    hold_ticket: str | None = None
    """A refusal's: the service's ticket for the calls refused here during its hold,
    sent back with their count (opaque)."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def session_token(self) -> str | None:
        """The session the service minted for this call's agent, to return to the MCP
        client in the result's `_meta` (None: the service mints none)."""
        value = self.raw.get("session_token")
        return value if isinstance(value, str) and value else None

    @property
    def from_service(self) -> bool:
        """True when the quota service itself decided (allowed or refused by quota)."""
        return self.outcome in (
            Outcome.ALLOWED,
            Outcome.QUOTA_EXCEEDED,
            Outcome.SESSION_SUSPENDED,
            Outcome.PRINCIPAL_SUSPENDED,
            Outcome.REPEATED_CALL,
        )
