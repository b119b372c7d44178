"""One call across MRTR rounds: our call id, sealed inside the `requestState` we hand out.

MCP 2026-07-28's multi-round-trip requests (`resultType: "input_required"`) are retried
as new requests with a new JSON-RPC id, carrying back the `requestState` the server
issued. When a guarded tool answers `input_required`, its `requestState` is wrapped in
an envelope that carries the call id the first round was checked under, HMAC-signed and
bound to the caller (principal or server token), the arguments' digest and an expiry.
On the retry the envelope is opened, the tool (or the proxied upstream) sees its own
`requestState` again, and the check is sent with the same call id: counted once.

The SDKs' own request-state boundary (mcp 2.x, FastMCP 4.x) seals the whole value again
on the wire; this envelope is what makes the call id ours to trust on any server.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

STATE_PREFIX = "mqc1."
STATE_KEY_ENV = "MCP_QUOTA_STATE_KEY"
"""A shared key (32+ characters) for servers run as several processes; else per process."""
STATE_TTL_SECONDS = 600
"""How long an MRTR retry stays the same call (the SDKs' own default)."""
MIN_KEY_LENGTH = 32
MAX_STATE = 16_384


@dataclass(frozen=True)
class OpenedState:
    """What our envelope carried back: the call id, and the tool's own state (or None)."""

    call_id: str
    inner: str | None


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def is_sealed(state: object) -> bool:
    """Whether a `requestState` is one of our envelopes (valid or not)."""
    return isinstance(state, str) and state.startswith(STATE_PREFIX)


class CallStateSealer:
    """Seals a call id into an MRTR `requestState` and opens it again on the retry."""

    def __init__(
        self,
        key: bytes,
        *,
        ttl_seconds: float = STATE_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Raises:
        ValueError: the key is shorter than 32 bytes."""
        if len(key) < MIN_KEY_LENGTH:
            raise ValueError(f"mcp-quota: {STATE_KEY_ENV} must be at least 32 characters")
        self._key = hashlib.sha256(b"mcp-quota call state|" + key).digest()
        self._ttl = ttl_seconds
        self._clock = clock

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> CallStateSealer:
        """The sealer under `MCP_QUOTA_STATE_KEY`, else under a key of this process.

        Raises:
            ValueError: the variable is set but shorter than 32 characters.
        """
        value = environ.get(STATE_KEY_ENV, "")
        return cls(value.encode("utf-8") if value else os.urandom(32))

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode("ascii"), hashlib.sha256).digest())

    @staticmethod
    def _bound(who: str, args_digest: str | None) -> str:
        return hashlib.sha256(f"{who}|{args_digest or '-'}".encode()).hexdigest()[:32]

    def seal(self, call_id: str, inner: str | None, who: str, args_digest: str | None) -> str:
        """The `requestState` to hand out in place of the tool's `inner`."""
        claims: dict[str, object] = {
            "c": call_id,
            "b": self._bound(who, args_digest),
            "e": int(self._clock() + self._ttl),
        }
        if inner is not None:
            claims["s"] = inner
        body = STATE_PREFIX + _b64(json.dumps(claims, separators=(",", ":")).encode("utf-8"))
        return f"{body}.{self._mac(body)}"

    def open(self, state: str, who: str, args_digest: str | None) -> OpenedState | None:
        """The call id and the tool's state of a genuine, unexpired envelope issued to
        this caller for these arguments; None for anything else (the retry then counts
        as a new call, the safe side)."""
        if len(state) > MAX_STATE or not state.isascii() or not is_sealed(state):
            return None
        body, _, mac = state.rpartition(".")
        if not hmac.compare_digest(self._mac(body), mac):
            return None
        try:
            claims = json.loads(_unb64(body[len(STATE_PREFIX) :]))
        except (binascii.Error, ValueError):
            return None
        if not isinstance(claims, dict):
            return None
        call_id, inner, expires = claims.get("c"), claims.get("s"), claims.get("e")
        if not isinstance(call_id, str) or not isinstance(expires, int):
            return None
        if expires <= self._clock() or claims.get("b") != self._bound(who, args_digest):
            return None
        return OpenedState(call_id, inner if isinstance(inner, str) else None)
