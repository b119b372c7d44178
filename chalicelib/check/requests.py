"""Parse and validate request bodies; every error names the offending field."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from chalicelib.clock import parse_iso_utc
from chalicelib.errors import InvalidRequest, PayloadTooLarge
from chalicelib.quota.core import ClientInfo, LeaseId
from chalicelib.quota.policy import MAX_LEASE, Policy

MAX_BODY_BYTES = 16 * 1024
MAX_SESSION_ID = 256
MAX_REASON = 1000
VISIBLE_ASCII = re.compile(r"^[\x21-\x7e]+$")
# Format characters that reorder text on screen (Trojan Source, CVE-2021-42574).
BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)
TOOL_NAME = re.compile(r"^(?:resource:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+|[A-Za-z0-9_.:/-]+)$")
"""A tool's name, or `resource:<uri>` (a resource read is checked as one, any URI character)."""
SERVER_NAME = re.compile(r"[ -~]+")  # printable ASCII: "articles MCP server"
ANNOTATION_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
CHECK_FIELDS = frozenset(
    {
        "session_id",
        "tool",
        "category",
        "annotations",
        "principal",
        "server",
        "call_id",
        "fail_open",
        "lease",
        "units",
        "refused_locally",
        "args_digest",
        "client",
        "session_token",
        "mint_session",
        "transport_session_id",
    }
)
CLIENT_FIELDS = {"name": 128, "version": 64, "oauth_client_id": 256}  # longest of each
MAX_UNITS = 1000
ARGS_DIGEST = re.compile(r"^[0-9a-f]{64}$")
# Path segments a URL parser removes (WHATWG URL, API Gateway): a session by one of
# these names could be counted but never opened in the console or the API.
UNADDRESSABLE = frozenset({".", ".."})
LEASE_RETURN_FIELDS = frozenset({"session_id", "lease", "unused"})
MAX_FAIL_OPEN = 1_000_000
MAX_HOLD_TICKET = 2048
MAX_SESSION_TOKEN = 2048  # longer is no token this service minted (`check/minted.py`)
MAX_TRANSPORT_SESSION = 128
EARLIEST_MS = 946_684_800_000  # 2000-01-01T00:00:00Z
LATEST_MS = 32_503_680_000_000  # 3000-01-01T00:00:00Z


@dataclass(frozen=True)
class HeldReport:
    """Refusals a client answered itself during a hold, with the hold's ticket (None: the
    old shape, a bare count, which counts nothing)."""

    refusals: int
    ticket: str | None = None


@dataclass(frozen=True)
class CheckRequest:
    """A validated `POST /v1/check` body."""

    session_id: str
    tool: str
    category: str | None = None
    read_only_hint: bool | None = None
    principal: str | None = None
    call_id: str | None = None
    fail_open: Mapping[str, int] | None = None
    server: str | None = None
    lease: int | None = None  # calls to reserve, this one included (leased categories only)
    asked: int | None = None  # internal: the lease first asked, when cut to what remains
    units: int = 1  # what the call weighs: counted at every scope, all or nothing
    refused_locally: Mapping[str, HeldReport] | None = None  # refusals the client held
    args_digest: str | None = None  # SHA-256 of the arguments; for the loop breaker (#22)
    client: ClientInfo | None = None  # the MCP client the agent runs in, where known
    # A session the service minted, echoed back: verified, it names the session counted.
    session_token: str | None = None
    # `session_id` is what the MCP side derived (no session named): answer with a token.
    mint_session: bool = False
    # The legacy `Mcp-Session-Id` the call came over: shown with the call, never a budget.
    transport_session_id: str | None = None


@dataclass(frozen=True)
class LeaseReturn:
    """A validated `POST /v1/leases/return` body: calls of a lease the client did not spend."""

    session_id: str
    lease: LeaseId
    unused: int


def parse_json_object(raw: bytes | None, limit: int = MAX_BODY_BYTES) -> dict[str, Any]:
    """Decode a request body that must be one JSON object of at most `limit` bytes.

    Raises:
        PayloadTooLarge: the body is over the size limit.
        InvalidRequest: the body is missing, not JSON, or not an object.
    """
    if raw is None or raw == b"":
        raise InvalidRequest("The request body is empty; send a JSON object.", "body")
    if len(raw) > limit:
        raise PayloadTooLarge(f"The request body is over {limit} bytes.")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"The request body is not valid JSON: {exc}.", "body") from exc
    except RecursionError as exc:
        raise InvalidRequest("The request body is nested too deeply.", "body") from exc
    except ValueError as exc:  # e.g. an integer past Python's int-from-string limit
        raise InvalidRequest(
            f"The request body holds a value out of range: {exc}.", "body"
        ) from exc
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", "body")
    return body


def reject_unknown(body: Mapping[str, Any], allowed: frozenset[str], where: str = "") -> None:
    """Refuse fields that are not part of the API, so typos never pass silently.

    Raises:
        InvalidRequest: an unknown field is present.
    """
    unknown = sorted(set(body) - allowed)
    if unknown:
        name = f"{where}{unknown[0]}"
        raise InvalidRequest(
            f"Unknown field '{name}'; allowed fields are {', '.join(sorted(allowed))}.", name
        )


def text_field(
    body: Mapping[str, Any],
    name: str,
    max_length: int,
    pattern: re.Pattern[str] = VISIBLE_ASCII,
    required: bool = True,
    rule: str = "visible ASCII characters",
) -> str | None:
    """A string field of 1..max_length characters matching `pattern`.

    Raises:
        InvalidRequest: the field is missing (when required), not a string, or malformed.
    """
    value = body.get(name)
    if value is None:
        if required:
            raise InvalidRequest(f"Field '{name}' is required.", name)
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"Field '{name}' must be a string.", name)
    if not 1 <= len(value) <= max_length:
        raise InvalidRequest(f"Field '{name}' must be 1 to {max_length} characters long.", name)
    if not pattern.fullmatch(value):
        raise InvalidRequest(f"Field '{name}' must contain only {rule}.", name)
    return value


def check_printable(value: str, field: str) -> str:
    """`value` if it can be stored as UTF-8 and shown safely to an operator: no control
    character (escape sequences), lone surrogate or bidi control (Trojan Source).

    Raises:
        InvalidRequest: a character of category Cc or Cs, or a bidi control, is present.
    """
    for char in value:
        if unicodedata.category(char) in ("Cc", "Cs") or char in BIDI_CONTROLS:
            raise InvalidRequest(
                f"Field '{field}' must not contain control characters (found U+{ord(char):04X}).",
                field,
            )
    return value


def showable_text(body: Mapping[str, Any], name: str, max_length: int) -> str:
    """A required string field of 1..max_length characters, not blank, that is safe to show
    an operator (see `check_printable`).

    Raises:
        InvalidRequest: missing, not a string, blank, too long or unshowable.
    """
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"Field '{name}' is required: a non-blank string.", name)
    if len(value) > max_length:
        raise InvalidRequest(f"Field '{name}' must be 1 to {max_length} characters long.", name)
    return check_printable(value, name)


def reason_field(body: Mapping[str, Any]) -> str:
    """The required `reason` of an administrator's action: it goes to the audit trail.

    Raises:
        InvalidRequest: missing, not a string, blank, too long or unshowable.
    """
    value = body.get("reason")
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest("Field 'reason' is required: it goes to the audit trail.", "reason")
    if len(value) > MAX_REASON:
        raise InvalidRequest(f"Field 'reason' must be at most {MAX_REASON} characters.", "reason")
    return check_printable(value.strip(), "reason")


def int_field(body: Mapping[str, Any], name: str, minimum: int = 1, maximum: int = 10**9) -> int:
    """An integer field within [minimum, maximum].

    Raises:
        InvalidRequest: missing, not an integer, or out of range.
    """
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidRequest(
            f"Field '{name}' must be an integer from {minimum} to {maximum}.", name
        )
    return value


def time_field(body: Mapping[str, Any], name: str) -> int:
    """An ISO-8601 time with a zone, in the years 2000 to 2999, as epoch ms.

    Raises:
        InvalidRequest: missing, not a string, not such a time, or out of range.
    """
    value = body.get(name)
    if not isinstance(value, str):
        raise InvalidRequest(f"Field '{name}' must be an ISO-8601 time with a zone.", name)
    try:
        parsed = parse_iso_utc(value)
    except (ValueError, OverflowError) as exc:
        raise InvalidRequest(
            f"Field '{name}' must be an ISO-8601 time with a zone, like 2026-12-24T08:00:00Z.",
            name,
        ) from exc
    if not EARLIEST_MS <= parsed < LATEST_MS:
        raise InvalidRequest(f"Field '{name}' must be a time in the years 2000 to 2999.", name)
    return parsed


def category_field(body: Mapping[str, Any], policy: Policy, name: str = "category") -> str:
    """A category the policy defines.

    Raises:
        InvalidRequest: missing, not a string, or unknown.
    """
    value = body.get(name)
    if not isinstance(value, str) or value not in policy.categories:
        known = ", ".join(sorted(policy.categories))
        raise InvalidRequest(f"Field '{name}' must be one of {known}.", name)
    return value


def session_id_param(raw: str) -> str:
    """Validate a session id taken from a URL path or a query.

    Raises:
        InvalidRequest: it is not 1-256 visible ASCII characters.
    """
    if not 1 <= len(raw) <= MAX_SESSION_ID or not VISIBLE_ASCII.fullmatch(raw):
        raise InvalidRequest(
            f"Session id must be 1 to {MAX_SESSION_ID} visible ASCII characters.", "session_id"
        )
    return raw


def _fail_open(raw: Any, policy: Policy, field: str = "fail_open") -> Mapping[str, int] | None:
    """The client's count of calls it let run uncounted while the service was unreachable."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest(f"Field '{field}' must be an object of category: count.", field)
    for category, count in raw.items():
        name = f"{field}.{category}"[:80]
        if category not in policy.categories:
            raise InvalidRequest(f"Field '{name}' names no category of this policy.", name)
        if not isinstance(count, int) or isinstance(count, bool):
            raise InvalidRequest(f"Field '{name}' must be an integer.", name)
        if not 0 <= count <= MAX_FAIL_OPEN:
            raise InvalidRequest(f"Field '{name}' must be from 0 to {MAX_FAIL_OPEN}.", name)
    return {str(k): int(v) for k, v in raw.items()}


def _held(raw: Any, policy: Policy) -> Mapping[str, HeldReport] | None:
    """The refusals the client answered itself during a refusal's hold, per category:
    `{"count": n, "ticket": "<the refusal's hold_ticket>"}`, or a bare count (the shape
    from before hold tickets: accepted, counted nothing)."""
    field = "refused_locally"
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest(f"Field '{field}' must be an object of category: report.", field)
    reports: dict[str, HeldReport] = {}
    for category, report in raw.items():
        name = f"{field}.{category}"[:80]
        if category not in policy.categories:
            raise InvalidRequest(f"Field '{name}' names no category of this policy.", name)
        if isinstance(report, dict):
            reject_unknown(report, frozenset({"count", "ticket"}), f"{name}.")
            ticket = report.get("ticket")
            valid = isinstance(ticket, str) and 0 < len(ticket) <= MAX_HOLD_TICKET
            if ticket is not None and not (valid and VISIBLE_ASCII.fullmatch(str(ticket))):
                where = f"{name}.ticket"[:80]
                raise InvalidRequest(f"Field '{where}' must be a refusal's hold_ticket.", where)
            count, name = report.get("count"), f"{name}.count"[:80]
        else:
            ticket, count = None, report
        if not isinstance(count, int) or isinstance(count, bool):
            raise InvalidRequest(f"Field '{name}' must be an integer.", name)
        if not 0 <= count <= MAX_FAIL_OPEN:
            raise InvalidRequest(f"Field '{name}' must be from 0 to {MAX_FAIL_OPEN}.", name)
        reports[str(category)] = HeldReport(count, ticket)
    return reports


def _read_only_hint(raw: Any) -> bool | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("Field 'annotations' must be an object.", "annotations")
    reject_unknown(raw, frozenset((*ANNOTATION_HINTS, "title")), "annotations.")
    for key in ANNOTATION_HINTS:
        if key in raw and not isinstance(raw[key], bool):
            name = f"annotations.{key}"
            raise InvalidRequest(f"Field '{name}' must be true or false.", name)
    if "title" in raw and not isinstance(raw["title"], str):
        raise InvalidRequest("Field 'annotations.title' must be a string.", "annotations.title")
    # Annotations present without readOnlyHint: the MCP default is "not read-only".
    return raw.get("readOnlyHint") is True


def _client(raw: Any) -> ClientInfo | None:
    """The optional `client` object: the MCP client's name and version and the OAuth
    client id, each a short string an operator can be shown."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("Field 'client' must be an object.", "client")
    reject_unknown(raw, frozenset(CLIENT_FIELDS), "client.")
    parts: dict[str, str | None] = {}
    for key, longest in CLIENT_FIELDS.items():
        value = raw.get(key)
        name = f"client.{key}"
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InvalidRequest(f"Field '{name}' must be a non-blank string.", name)
        if value is not None and len(value) > longest:
            raise InvalidRequest(f"Field '{name}' must be 1 to {longest} characters long.", name)
        parts[key] = None if value is None else check_printable(value, name)
    return ClientInfo(**parts) if any(parts.values()) else None


def parse_check(body: Mapping[str, Any], policy: Policy) -> CheckRequest:
    """Validate a check request against the API and the stage's policy.

    Raises:
        InvalidRequest: a field is missing, malformed, unknown, or names no category.
    """
    reject_unknown(body, CHECK_FIELDS)
    session_id = text_field(body, "session_id", 256)
    tool = text_field(
        body,
        "tool",
        128,
        TOOL_NAME,
        rule="letters, digits and _ . : / - (after resource:, any URI character)",
    )
    category = text_field(body, "category", 32, required=False)
    if category is not None and category not in policy.categories:
        known = ", ".join(sorted(policy.categories))
        raise InvalidRequest(
            f"Unknown category {category!r}; this policy defines {known}.", "category"
        )
    assert session_id is not None and tool is not None  # required=True guarantees it
    if session_id in UNADDRESSABLE:
        raise InvalidRequest(
            f"Session id {session_id!r} cannot be used: browsers and gateways fold it out of "
            "a URL path, so no administrator could open the session. Use another id.",
            "session_id",
        )
    units = 1 if body.get("units") is None else int_field(body, "units", 1, MAX_UNITS)
    digest = text_field(body, "args_digest", 64, ARGS_DIGEST, False, "64 lowercase hex digits")
    return CheckRequest(
        session_id=session_id,
        tool=tool,
        category=category,
        read_only_hint=_read_only_hint(body.get("annotations")),
        principal=text_field(body, "principal", 256, required=False),
        call_id=text_field(body, "call_id", 128, required=False),
        server=text_field(body, "server", 128, SERVER_NAME, False, "printable ASCII characters"),
        fail_open=_fail_open(body.get("fail_open"), policy),
        lease=None if body.get("lease") is None else int_field(body, "lease", 1, MAX_LEASE),
        units=units,
        refused_locally=_held(body.get("refused_locally"), policy),
        args_digest=digest,
        client=_client(body.get("client")),
        session_token=_session_token(body.get("session_token")),
        mint_session=_flag(body, "mint_session"),
        transport_session_id=text_field(
            body, "transport_session_id", MAX_TRANSPORT_SESSION, required=False
        ),
    )


def _session_token(raw: Any) -> str | None:
    """The echoed `session_token`, as sent: any string (what is not a genuine token is
    refused as one, by `check/minted.py`, with its own code)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise InvalidRequest(
            "Field 'session_token' must be a string: the session token of an earlier answer.",
            "session_token",
        )
    return raw


def _flag(body: Mapping[str, Any], name: str) -> bool:
    """An optional true/false field (absent: false).

    Raises:
        InvalidRequest: present and not a boolean.
    """
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise InvalidRequest(f"Field '{name}' must be true or false.", name)
    return value


def parse_lease_return(body: Mapping[str, Any]) -> LeaseReturn:
    """Validate a lease return: the session, the lease id a check answered, and how many
    of its calls were not spent (at most what it granted).

    Raises:
        InvalidRequest: a field is missing, malformed or unknown.
    """
    reject_unknown(body, LEASE_RETURN_FIELDS)
    session_id = text_field(body, "session_id", MAX_SESSION_ID)
    assert session_id is not None
    raw = body.get("lease")
    lease = LeaseId.parse(raw) if isinstance(raw, str) else None
    if lease is None:
        raise InvalidRequest("Field 'lease' must be a lease id from a check's answer.", "lease")
    unused = int_field(body, "unused", 0, lease.granted)
    return LeaseReturn(session_id, lease, unused)
