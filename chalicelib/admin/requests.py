"""Administrator requests: bodies and query strings parsed into typed requests. Every
error names the offending field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.auth.tokens import OWN_PRINCIPAL_PREFIX, ROLES, SERVER
from chalicelib.check.requests import (
    VISIBLE_ASCII,
    category_field,
    int_field,
    reason_field,
    reject_unknown,
    session_id_param,
    showable_text,
    text_field,
    time_field,
)
from chalicelib.errors import InvalidPageToken, InvalidRequest, NotFound
from chalicelib.quota.core import SessionState
from chalicelib.quota.events import EventType
from chalicelib.quota.policy import Policy
from chalicelib.storage.ports import AuditFilter

GRANT_ID = re.compile(r"g-[0-9a-f]{12}")
TOKEN_ID = re.compile(r"[0-9a-f]{12}")
MAX_TOKEN_NAME = 64
MAX_PRINCIPALS = 32
MAX_PRINCIPAL = 256
AUDIT_PAGE = re.compile(r"[0-9]{1,3}")
MAX_PAGE_TOKEN = 2048


MAX_RAISE_SECONDS = 30 * 86_400
SESSION_STATES = tuple(str(s) for s in SessionState if s is not SessionState.UNSEEN)
DAY_MS = 86_400_000
EVENT_TYPES = tuple(str(t) for t in EventType)
AUDIT_FILTERS = frozenset({"type", "principal", "server", "until"})


@dataclass(frozen=True)
class RaiseRequest:
    """Raise one category's limit: to `limit`, or by `add`; for `expires_in_seconds`, or
    for as long as the counters last."""

    category: str
    reason: str
    limit: int | None = None
    add: int | None = None
    expires_in_seconds: int | None = None

    def new_limit(self, current: int) -> int:
        """The limit asked for, given the current one."""
        return self.limit if self.limit is not None else current + (self.add or 0)


@dataclass(frozen=True)
class GrantRequest:
    """A planned raise for a principal in a time window."""

    principal: str
    category: str
    limit: int
    starts_at_ms: int
    ends_at_ms: int
    reason: str


@dataclass(frozen=True)
class TokenRequest:
    """A new token of the caller's tenant; `principals` binds a server token."""

    role: str
    name: str
    principals: tuple[str, ...] = ()


@dataclass(frozen=True)
class AuditQuery:
    """A page of the audit trail of one session (oldest first), or of every event of the
    tenant that `where` holds (newest first)."""

    session_id: str | None
    since_ms: int
    limit: int
    next_token: str | None
    where: AuditFilter = field(default_factory=AuditFilter)


@dataclass(frozen=True)
class LowerRequest:
    """Bring one category's raised limit back down to the base."""

    category: str
    reason: str


@dataclass(frozen=True)
class SessionsQuery:
    """A page of the sessions that were blocked or suspended since `since_ms`."""

    state: str | None
    since_ms: int
    limit: int
    next_token: str | None = None


def parse_raise(body: Mapping[str, Any], policy: Policy) -> RaiseRequest:
    """Raises: InvalidRequest."""
    reject_unknown(body, frozenset({"category", "limit", "add", "reason", "expires_in_seconds"}))
    category = category_field(body, policy)
    reason = reason_field(body)
    if ("limit" in body) == ("add" in body):
        raise InvalidRequest("Give exactly one of 'limit' or 'add'.", "limit")
    expires = None
    if "expires_in_seconds" in body:
        expires = int_field(body, "expires_in_seconds", 1, MAX_RAISE_SECONDS)
    if "limit" in body:
        limit = int_field(body, "limit")
        return RaiseRequest(category, reason, limit=limit, expires_in_seconds=expires)
    return RaiseRequest(category, reason, add=int_field(body, "add"), expires_in_seconds=expires)


def parse_lower(body: Mapping[str, Any], policy: Policy) -> LowerRequest:
    """Raises: InvalidRequest."""
    reject_unknown(body, frozenset({"category", "reason"}))
    return LowerRequest(category_field(body, policy), reason_field(body))


def parse_sessions_query(params: Mapping[str, str], now_ms: int) -> SessionsQuery:
    """Raises: InvalidRequest."""
    reject_unknown(params, frozenset({"state", "since", "limit", "next"}))
    state = params.get("state")
    if state is not None and state not in SESSION_STATES:
        raise InvalidRequest(
            f"Parameter 'state' must be one of {', '.join(SESSION_STATES)}.", "state"
        )
    since = time_field(params, "since") if "since" in params else now_ms - DAY_MS
    raw_limit = params.get("limit", "50")
    if not AUDIT_PAGE.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= 100:
        raise InvalidRequest("Parameter 'limit' must be an integer from 1 to 100.", "limit")
    return SessionsQuery(state, since, int(raw_limit), _page_token(params))


def _page_token(params: Mapping[str, str]) -> str | None:
    """Raises: InvalidPageToken: a `next` no listing could have issued."""
    token = params.get("next")
    if token is not None and not (len(token) <= MAX_PAGE_TOKEN and VISIBLE_ASCII.fullmatch(token)):
        raise InvalidPageToken()
    return token


def principal_param(raw: str) -> str:
    """A principal named in a URL path (percent-decoded by the caller).

    Raises:
        InvalidRequest: it is not 1-256 visible ASCII characters.
    """
    if not 1 <= len(raw) <= 256 or not VISIBLE_ASCII.fullmatch(raw):
        raise InvalidRequest("Principal must be 1 to 256 visible ASCII characters.", "principal")
    return raw


def parse_reason(body: Mapping[str, Any]) -> str:
    """The body of suspend, resume and reset: only a reason.

    Raises:
        InvalidRequest: an unknown field, or a missing or bad reason.
    """
    reject_unknown(body, frozenset({"reason"}))
    return reason_field(body)


def parse_grant(body: Mapping[str, Any], policy: Policy, now_ms: int) -> GrantRequest:
    """Raises: InvalidRequest, also for a window that is empty or over, or a limit that is
    not above the policy's or is above its maximum."""
    reject_unknown(
        body, frozenset({"principal", "category", "limit", "starts_at", "ends_at", "reason"})
    )
    principal = text_field(body, "principal", 256)
    assert principal is not None
    category = category_field(body, policy)
    limit = int_field(body, "limit")
    starts, ends = time_field(body, "starts_at"), time_field(body, "ends_at")
    reason = reason_field(body)
    spec = policy.categories[category]
    if ends <= starts:
        raise InvalidRequest("Field 'ends_at' must be after 'starts_at'.", "ends_at")
    if ends <= now_ms:
        raise InvalidRequest("Field 'ends_at' is in the past.", "ends_at")
    if limit <= spec.limit:
        raise InvalidRequest(
            f"A grant can only raise: '{category}' is already {spec.limit}.", "limit"
        )
    if limit > spec.max_limit:
        raise InvalidRequest(
            f"The policy caps '{category}' at {spec.max_limit} calls per session.", "limit"
        )
    return GrantRequest(principal, category, limit, starts, ends, reason)


def grant_id_param(raw: str) -> str:
    """Raises: NotFound: it cannot be a grant id (so no grant has it)."""
    if not GRANT_ID.fullmatch(raw):
        raise NotFound(f"No grant {raw[:40]!r} in this tenant.")
    return raw


def _principal_patterns(raw: Any) -> tuple[str, ...]:
    """1 to 32 principal names or fnmatch patterns, each 1-256 visible ASCII, deduplicated.

    Raises:
        InvalidRequest: not such a list.
    """
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_PRINCIPALS:
        raise InvalidRequest(
            f"Field 'principals' must be a list of 1 to {MAX_PRINCIPALS} principal names or "
            "patterns (omit it for a token that acts only as itself).",
            "principals",
        )
    for index, pattern in enumerate(raw):
        if not (
            isinstance(pattern, str)
            and 1 <= len(pattern) <= MAX_PRINCIPAL
            and VISIBLE_ASCII.fullmatch(pattern)
        ):
            raise InvalidRequest(
                f"Field 'principals' item {index} must be 1 to {MAX_PRINCIPAL} visible ASCII "
                "characters: a principal, or a pattern with * ? [...].",
                "principals",
            )
        if pattern.startswith(OWN_PRINCIPAL_PREFIX):
            raise InvalidRequest(
                f"Field 'principals' item {index}: principals starting with "
                f"{OWN_PRINCIPAL_PREFIX!r} are reserved, each for its own token.",
                "principals",
            )
    return tuple(dict.fromkeys(raw))


def parse_token(body: Mapping[str, Any]) -> TokenRequest:
    """The body of `POST /v1/tokens`; the tenant is never in it (it is the caller's).

    Raises:
        InvalidRequest: an unknown field, a bad role or name, or principals that are not a
            list of patterns or are given for an admin token.
    """
    reject_unknown(body, frozenset({"role", "name", "principals"}))
    role = body.get("role")
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidRequest(f"Field 'role' must be one of {', '.join(ROLES)}.", "role")
    name = showable_text(body, "name", MAX_TOKEN_NAME)
    if body.get("principals") is None:
        return TokenRequest(role, name)
    if role != SERVER:
        raise InvalidRequest(
            "Field 'principals' binds a server token; an admin token acts only as itself.",
            "principals",
        )
    return TokenRequest(role, name, _principal_patterns(body["principals"]))


def token_id_param(raw: str) -> str:
    """Raises: NotFound: it cannot be a token id (so no token has it)."""
    if not TOKEN_ID.fullmatch(raw):
        raise NotFound(f"No token {raw[:40]!r} in this tenant.")
    return raw


def _audit_filter(params: Mapping[str, str], since_ms: int) -> AuditFilter:
    """Raises: InvalidRequest: an unknown type, or a principal or server that no check
    could have sent."""
    raw_type = params.get("type")
    if raw_type is not None and raw_type not in EVENT_TYPES:
        raise InvalidRequest(f"Parameter 'type' must be one of {', '.join(EVENT_TYPES)}.", "type")
    named: dict[str, str] = {}
    for name in ("principal", "server"):
        value = params.get(name)
        if value is not None:
            if not 1 <= len(value) <= MAX_PRINCIPAL or not VISIBLE_ASCII.fullmatch(value):
                raise InvalidRequest(
                    f"Parameter '{name}' must be 1 to {MAX_PRINCIPAL} visible ASCII characters.",
                    name,
                )
            named[name] = value
    until = time_field(params, "until") if "until" in params else None
    if until is not None and until < since_ms:
        raise InvalidRequest("Parameter 'until' must not be before 'since'.", "until")
    return AuditFilter(
        type=None if raw_type is None else EventType(raw_type),
        principal=named.get("principal"),
        server=named.get("server"),
        since_ms=since_ms,
        until_ms=until,
    )


def parse_audit_query(params: Mapping[str, str]) -> AuditQuery:
    """Raises: InvalidRequest."""
    reject_unknown(params, frozenset({"session_id", "since", "limit", "next"}) | AUDIT_FILTERS)
    session_id = params.get("session_id")
    since = time_field(params, "since") if "since" in params else 0
    raw_limit = params.get("limit", "50")
    if not AUDIT_PAGE.fullmatch(raw_limit) or not 1 <= int(raw_limit) <= 500:
        raise InvalidRequest("Parameter 'limit' must be an integer from 1 to 500.", "limit")
    if session_id is not None:
        both = sorted(AUDIT_FILTERS & set(params))
        if both:
            raise InvalidRequest(
                f"Parameter '{both[0]}' filters the tenant-wide trail; with 'session_id' "
                "the session's whole trail is listed, oldest first.",
                both[0],
            )
    return AuditQuery(
        session_id=None if session_id is None else session_id_param(session_id),
        since_ms=since,
        limit=int(raw_limit),
        next_token=_page_token(params),
        where=_audit_filter(params, since),
    )
