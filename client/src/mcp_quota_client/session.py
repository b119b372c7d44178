"""Which quota session a tool call belongs to, and which call it is.

A quota keyed on a per-request identifier never trips, so the session key is
resolved in a fixed, documented order (see `resolve_session`). Everything here is
pure: the framework adapters gather a `CallerInfo` and pass it in.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from mcp_quota_client.decision import ClientInfo

META_SESSION_KEY = "io.mcp-quota/session"
"""`_meta` key a client sets on `tools/call` to name its quota session explicitly."""
META_CALL_ID_KEY = "io.mcp-quota/call-id"
"""`_meta` key a client sets to the same value when it retries the same tool call."""
META_DECISION_KEY = "io.mcp-quota/decision"
META_SHADOW_KEY = "io.mcp-quota/shadow"
META_CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
"""Where a 2026-07-28 request may carry the client's name and version (no `initialize`)."""
"""`_meta` key of a shadowed call's result: what an enforcing policy would have said."""
"""`_meta` key on an allowed tool result carrying the quota decision (used, limit, ...)."""

MAX_SESSION_ID = 256
MAX_CALL_ID = 128
MAX_PRINCIPAL = 256

PROCESS_KEY = uuid.uuid4().hex
"""Identifies this server process: on stdio the process is the connection."""

_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


class SessionSource(StrEnum):
    """Where a session key came from, in resolution order."""

    META = "meta"
    TRANSPORT = "transport"
    PRINCIPAL = "principal"
    DERIVED = "derived"


class SessionKeying(StrEnum):
    """How a deployment keys quota sessions."""

    CLIENT = "client"
    """Client-chosen: `_meta` session, else transport session, else derived. Reconnecting
    with a new session id starts a fresh budget."""
    PRINCIPAL = "principal"
    """Server-chosen: one budget per authenticated principal (else per connection), so a
    client cannot reset its counters by reconnecting or changing ids."""


@dataclass(frozen=True, kw_only=True)
class CallerInfo:
    """What the MCP server knows about the caller of one tool call."""

    meta: Mapping[str, object] | None = None
    """The request's `_meta` object, as sent."""
    transport_session_id: str | None = None
    """`Mcp-Session-Id` on handshake-era streamable HTTP; None on 2026-07-28 and stdio."""
    principal: str | None = None
    """Who the agent acts for, from the server's authentication, when known."""
    transport: str | None = None
    """"streamable-http", "sse", "stdio", or None when unknown / in-process."""
    peer: str | None = None
    """Remote address of an HTTP caller."""
    request_id: str | int | None = None
    """The JSON-RPC request id."""
    server_name: str | None = None
    """The MCP server's own name: two servers never share a derived key."""
    client: ClientInfo | None = None
    """The MCP client's name and version and the OAuth client id, where known."""


@dataclass(frozen=True)
class SessionIdentity:
    """The session key sent to the quota service and where it came from."""

    session_id: str
    source: SessionSource


def safe_key(value: str, max_length: int) -> str:
    """`value` if it is 1..max_length visible ASCII, else a stable hash of it."""
    if len(value) <= max_length and _VISIBLE_ASCII.fullmatch(value):
        return value
    return "sha256:" + _digest(value, 40)


def _digest(value: str, length: int) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _meta_string(meta: Mapping[str, object] | None, key: str) -> str | None:
    if meta is None:
        return None
    value = meta.get(key)
    if isinstance(value, str) and value:
        return value
    return None


def _derived(caller: CallerInfo, process_key: str) -> SessionIdentity:
    who = caller.principal or "-"
    if caller.transport in ("streamable-http", "sse") and caller.peer:
        where = f"peer|{caller.peer}"
    else:
        where = f"process|{process_key}"
    # The server's name is part of the key: two MCP servers that share a service token
    # and see the same caller must not share a budget by accident.
    server = caller.server_name or "-"
    key = _digest(f"{server}|{who}|{where}", 32)
    return SessionIdentity("derived:" + key, SessionSource.DERIVED)


def resolve_session(
    caller: CallerInfo,
    keying: SessionKeying = SessionKeying.CLIENT,
    *,
    process_key: str = PROCESS_KEY,
) -> SessionIdentity:
    """Resolve the quota session of one tool call.

    With `SessionKeying.CLIENT` (the default), in order:
      1. `_meta["io.mcp-quota/session"]` sent by the client;
      2. the transport session id (`Mcp-Session-Id`), where the protocol has one;
      3. a key derived from this MCP server's name, the principal and the connection
         (the peer address over HTTP, the server process on stdio).
    With `SessionKeying.PRINCIPAL`: the principal when authenticated, else step 3.
    Client-sent ids are ignored, so reconnecting cannot reset the budget.
    """
    if keying is SessionKeying.CLIENT:
        explicit = _meta_string(caller.meta, META_SESSION_KEY)
        if explicit is not None:
            return SessionIdentity(safe_key(explicit, MAX_SESSION_ID), SessionSource.META)
        if caller.transport_session_id:
            return SessionIdentity(
                safe_key("mcp:" + caller.transport_session_id, MAX_SESSION_ID),
                SessionSource.TRANSPORT,
            )
    elif caller.principal is not None:
        return SessionIdentity(
            safe_key("principal:" + caller.principal, MAX_SESSION_ID), SessionSource.PRINCIPAL
        )
    return _derived(caller, process_key)


def resolve_call_id(caller: CallerInfo) -> str | None:
    """The idempotency key of one tool call, or None to let the client generate one.

    1. `_meta["io.mcp-quota/call-id"]`: the client sends the same value when it
       retries the same call, so the retry is not counted twice.
    2. On a transport session, the JSON-RPC request id, qualified by that session:
       ids are unique only within one transport session.
    Otherwise None. A bare JSON-RPC id is never used on its own: clients restart
    ids at each connection, and a reused id would be replayed as a duplicate,
    letting the call run uncounted.
    """
    explicit = _meta_string(caller.meta, META_CALL_ID_KEY)
    if explicit is not None:
        return safe_key(explicit, MAX_CALL_ID)
    if caller.transport_session_id and caller.request_id is not None:
        scope = _digest(caller.transport_session_id, 16)
        return safe_key(f"rpc:{scope}:{caller.request_id}", MAX_CALL_ID)
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
