"""Which quota session a tool call belongs to, and which call it is.

MCP 2026-07-28 has no sessions (SEP-2567) and re-sends a broken call as a new request
with a new JSON-RPC id, so neither the transport session nor the JSON-RPC id can be a
budget boundary or a retry key. The session is resolved in one fixed order
(`resolve_session`), and the call in another (`resolve_call_id`); both are pure: the
framework adapters (FastMCP middleware, SDK guard, and the proxy through the FastMCP
middleware) gather a `CallerInfo` and pass it in.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from mcp_quota_client.decision import ClientInfo

META_SESSION_KEY = "io.mcp-quota/session"
"""`_meta` key of a `tools/call`'s quota session: one the client names, or the one the
service minted and returned in an earlier result's `_meta` under the same key."""
META_CALL_ID_KEY = "io.mcp-quota/call-id"
"""`_meta` key a client sets to the same value when it retries the same tool call."""
META_DECISION_KEY = "io.mcp-quota/decision"
"""`_meta` key on an allowed tool result carrying the quota decision (used, limit, ...)."""
META_SHADOW_KEY = "io.mcp-quota/shadow"
"""`_meta` key of a shadowed call's result: what an enforcing policy would have said."""
META_CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
"""Where a 2026-07-28 request may carry the client's name and version (no `initialize`)."""

MINTED_PREFIX = "mqs1-"
"""How a session the service minted begins (`chalicelib/check/minted.py`)."""
MAX_MINTED = 1024
MAX_SESSION_ID = 256
MAX_CALL_ID = 128
MAX_TRANSPORT_SESSION = 128
MAX_PRINCIPAL = 256
SESSION_FROM_ENV = "MCP_QUOTA_SESSION_FROM"
"""Mirrors the policy's `session_from`: `transport` makes `Mcp-Session-Id` a boundary."""

_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


class SessionSource(StrEnum):
    """Where a session key came from, in resolution order."""

    META = "meta"
    """Named by the client in `_meta["io.mcp-quota/session"]`."""
    MINTED = "minted"
    """Minted by the service on an earlier call and echoed back by the client."""
    TRANSPORT = "transport"
    """The legacy `Mcp-Session-Id`, only under `session_from: transport`."""
    PRINCIPAL = "principal"
    DERIVED = "derived"
    """From who calls: principal (or server token), client id and server."""


class SessionKeying(StrEnum):
    """How a deployment keys quota sessions."""

    CLIENT = "client"
    """The default: a named session, else a minted one echoed back, else one derived
    from who calls (principal or server token, client id, server). Connections and
    transport session ids are not boundaries."""
    PRINCIPAL = "principal"
    """One budget per authenticated principal (else derived): ids the client sends are
    ignored, so a client cannot reset its counters by changing them."""
    TRANSPORT = "transport"
    """The policy's `"session_from": "transport"`: as CLIENT, but a legacy
    `Mcp-Session-Id` comes before the minted and derived session."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> SessionKeying:
        """TRANSPORT when `MCP_QUOTA_SESSION_FROM=transport`, else CLIENT.

        Raises:
            ValueError: the variable names no keying.
        """
        value = environ.get(SESSION_FROM_ENV, "").strip().lower()
        if not value or value == "caller":
            return cls.CLIENT
        try:
            return cls(value)
        except ValueError:
            raise ValueError(
                f"mcp-quota: {SESSION_FROM_ENV}={value!r} is not one of caller, "
                "transport, principal"
            ) from None


@dataclass(frozen=True, kw_only=True)
class CallerInfo:
    """What the MCP server knows about the caller of one tool call."""

    meta: Mapping[str, object] | None = None
    """The request's `_meta` object, as sent."""
    transport_session_id: str | None = None
    """`Mcp-Session-Id` on handshake-era streamable HTTP; None on 2026-07-28 and stdio."""
    principal: str | None = None
    """Who the agent acts for, from the server's authentication, when known."""
    server_identity: str | None = None
    """Who counts when no principal is known: a digest of the server token."""
    transport: str | None = None
    """"streamable-http", "sse", "stdio", or None when unknown / in-process."""
    peer: str | None = None
    """Remote address of an HTTP caller (shown, never a key)."""
    request_id: str | int | None = None
    """The JSON-RPC request id (never a key: a retry has a new one)."""
    server_name: str | None = None
    """The MCP server's own name: two servers never share a derived key."""
    client: ClientInfo | None = None
    """The MCP client's name and version and the OAuth client id, where known."""
    state_call_id: str | None = None
    """The call id our sealed `requestState` carried back on an MRTR retry."""


@dataclass(frozen=True)
class SessionIdentity:
    """The session key sent to the quota service and where it came from."""

    session_id: str
    source: SessionSource
    minted: str | None = None
    """The service-minted session the client echoed (MINTED): sent for the service to
    verify; `session_id` is then the derived key, what a service without minting uses."""
    transport: str | None = field(default=None, compare=False)
    """The legacy `Mcp-Session-Id` the call came over (in the service's charset): sent
    to be shown with the call; a budget boundary only as TRANSPORT's `session_id`."""

    @property
    def mint(self) -> bool:
        """Whether the service is asked to mint a session: none was named or echoed,
        and `session_id` is what this side derived from who calls."""
        return self.source is SessionSource.DERIVED


def safe_key(value: str, max_length: int) -> str:
    """`value` if it is 1..max_length visible ASCII, else a stable hash of it."""
    if len(value) <= max_length and _VISIBLE_ASCII.fullmatch(value):
        return value
    return "sha256:" + _digest(value, 40)


def _digest(value: str, length: int) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def token_identity(token: str) -> str:
    """Who a server token is, as a derived key names it: a digest, never the secret."""
    return "token-sha256:" + _digest(token, 16)


def _meta_string(meta: Mapping[str, object] | None, key: str) -> str | None:
    if meta is None:
        return None
    value = meta.get(key)
    if isinstance(value, str) and value:
        return value
    return None


def stable_client_id(client: ClientInfo | None) -> str | None:
    """Which client calls: the OAuth client id (a URL under Client ID Metadata
    Documents), else the client's own name (a claim: a key, never a credential)."""
    if client is None:
        return None
    return client.oauth_client_id or client.name


def derived_session(caller: CallerInfo) -> SessionIdentity:
    """The session of who calls: principal (else the server token), client id, server.

    No connection, transport session or request id takes part: a client that opens a
    connection (or a process) per call stays in one session, which ends, like any, after
    the policy's idle timeout.
    """
    who = caller.principal or caller.server_identity or "-"
    client = stable_client_id(caller.client) or "-"
    # The server's name is part of the key: two MCP servers that share a service token
    # and see the same caller must not share a budget by accident.
    server = caller.server_name or "-"
    key = _digest(f"{server}|{who}|{client}", 32)
    return SessionIdentity("derived:" + key, SessionSource.DERIVED)


def resolve_session(
    caller: CallerInfo, keying: SessionKeying = SessionKeying.CLIENT
) -> SessionIdentity:
    """`_resolve_session`, with the call's legacy transport session to show beside it."""
    identity = _resolve_session(caller, keying)
    if not caller.transport_session_id:
        return identity
    return replace(identity, transport=safe_key(caller.transport_session_id, MAX_TRANSPORT_SESSION))


def _resolve_session(caller: CallerInfo, keying: SessionKeying) -> SessionIdentity:
    """Resolve the quota session of one tool call: the one order every path uses.

    With `SessionKeying.CLIENT` (the default), in order:
      1. a session named in `_meta["io.mcp-quota/session"]`;
      2. a session the service minted (`mqs1-...`) that the client echoes back under
         the same key (the service verifies it; this side cannot);
      3. derived from who calls: principal (else the server token), the client's stable
         id (OAuth client id, else clientInfo.name) and this server's name; the service
         is asked to mint a session for it (`SessionIdentity.mint`), which the result
         carries back under the key of step 1, for the client to echo (step 2).
    `SessionKeying.TRANSPORT` puts the legacy `Mcp-Session-Id` between 1 and 2.
    `SessionKeying.PRINCIPAL`: the principal when authenticated, else 3.
    """
    if keying is SessionKeying.PRINCIPAL:
        if caller.principal is not None:
            return SessionIdentity(
                safe_key("principal:" + caller.principal, MAX_SESSION_ID),
                SessionSource.PRINCIPAL,
            )
        return derived_session(caller)
    sent = _meta_string(caller.meta, META_SESSION_KEY)
    minted = sent is not None and sent.startswith(MINTED_PREFIX) and len(sent) <= MAX_MINTED
    if sent is not None and not minted:
        return SessionIdentity(safe_key(sent, MAX_SESSION_ID), SessionSource.META)
    if keying is SessionKeying.TRANSPORT and caller.transport_session_id:
        return SessionIdentity(
            safe_key("mcp:" + caller.transport_session_id, MAX_SESSION_ID),
            SessionSource.TRANSPORT,
        )
    derived = derived_session(caller)
    if minted:
        return SessionIdentity(derived.session_id, SessionSource.MINTED, sent)
    return derived


def resolve_call_id(caller: CallerInfo) -> str | None:
    """The idempotency key of one tool call, or None (the check then has none of its own).

    1. `_meta["io.mcp-quota/call-id"]`: the client sends the same value when it
       re-sends the same call, so the retry is not counted twice;
    2. on an MRTR retry, the call id our sealed `requestState` carries.
    Never the JSON-RPC id: a re-sent request and an MRTR retry both carry a new one
    (so it would not match), and ids restart on each connection (so a reused one
    would replay an old answer and let a new call run uncounted).
    """
    explicit = _meta_string(caller.meta, META_CALL_ID_KEY)
    if explicit is not None:
        return safe_key(explicit, MAX_CALL_ID)
    if caller.state_call_id:
        return safe_key(caller.state_call_id, MAX_CALL_ID)
    return None


def principal_from_token(client_id: str | None, subject: str | None) -> str | None:
    """A principal string from an OAuth access token's identity.

    The subject (the resource owner) when the token verifier supplies one, else the
    OAuth client id, so an administrator can grant by the name they know.
    Non-ASCII or long values are hashed to fit the service's charset.
    """
    who = subject or client_id
    if not who:
        return None
    return safe_key(who, MAX_PRINCIPAL)


def client_info(
    initialize: object | None,
    meta: Mapping[str, object] | None,
    oauth_client_id: str | None = None,
) -> ClientInfo | None:
    """The MCP client of a request: name and version from the `initialize` params'
    clientInfo (any object with `client_info.name`/`.version`), else from the request's
    `_meta`; with the OAuth client id when the server authenticated one."""
    info = getattr(initialize, "client_info", None)
    name, version = getattr(info, "name", None), getattr(info, "version", None)
    sent = meta.get(META_CLIENT_INFO_KEY) if meta is not None else None
    if name is None and isinstance(sent, Mapping):
        name, version = sent.get("name"), sent.get("version")
    found = ClientInfo(
        name=name if isinstance(name, str) else None,
        version=version if isinstance(version, str) else None,
        oauth_client_id=oauth_client_id,
    )
    return found if found.to_json() else None
