"""Sessions the service mints (issue 31): the second step of the one session order.

A check that names no session sends the key its MCP side derived from who calls, with
`mint_session`; the service counts the call in that session and answers a
`session_token` that it signed (the one scheme, `chalicelib/signed.py`, with its own key
made from the link keys): it binds tenant, session, principal and an expiry of one idle
timeout. The MCP side returns it in the result's `_meta["io.mcp-quota/session"]`; a
client that echoes it back is counted in that session whatever it derives this time (a
fresh connection, another client name), and every answer renews it. A token that is
not genuine, or another tenant's, or another principal's, is refused: nothing is
counted. One that has expired names a session that has ended like any idle one: the call
counts in the session sent, and a new token is answered.

This happens before the check and after its decision, at the request and answer layer:
the check itself sees an ordinary session id.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from chalicelib.auth.tokens import Identity, effective_principal
from chalicelib.check.requests import CheckRequest
from chalicelib.clock import Clock
from chalicelib.errors import SessionTokenInvalid, SessionTokenOtherPrincipal
from chalicelib.observability import logger
from chalicelib.signed import KeyRing, PurposeSigner
from chalicelib.storage.ports import StorageError

SESSION_VERSION = "mqs1"  # a token reads `mqs1-<key id>.<payload>.<signature>`
PURPOSE = b"mcp-quota session token key"  # domain separation from links and tickets


@dataclass(frozen=True)
class MintedSession:
    """What a session token binds; the signature covers every field."""

    tenant: str
    session_id: str
    principal: str
    expires_ms: int

    def to_compact(self) -> dict[str, Any]:
        return {"t": self.tenant, "s": self.session_id, "p": self.principal, "e": self.expires_ms}

    @classmethod
    def from_compact(cls, raw: dict[str, Any] | None) -> MintedSession | None:
        """The session, or None if `raw` is not one this service writes."""
        if raw is None:
            return None
        try:
            tenant, session, principal = str(raw["t"]), str(raw["s"]), str(raw["p"])
            return cls(tenant, session, principal, int(raw["e"]))
        except (KeyError, ValueError, TypeError):
            return None


@dataclass(frozen=True)
class Sealing:
    """What the answer to one check carries: a token for its session, or none."""

    mint: SessionMint
    tenant: str
    principal: str
    answer: bool  # asked for (`mint_session`), or a token was echoed: renewed

    def token(self, session_id: str) -> str | None:
        """The token of `session_id` for this caller, if the answer carries one."""
        return self.mint.mint(self.tenant, session_id, self.principal) if self.answer else None


class SessionMint:
    """Verifies the session tokens checks echo, and mints the ones answers carry."""

    def __init__(self, keys: KeyRing, clock: Clock, idle_seconds: int) -> None:
        """`keys`: the link keys, of which none may be configured (then no answer carries
        a token, and an echoed one is ignored: the call counts in the session it sends,
        as on a service that mints none)."""
        self._keys = keys
        self._clock = clock
        self._idle_ms = idle_seconds * 1000

    def resolve(self, identity: Identity, request: CheckRequest) -> tuple[CheckRequest, Sealing]:
        """The request in the session its echoed token names (else as sent), and what
        its answer carries.

        Raises:
            SessionTokenInvalid: the token is not one this service minted for this tenant.
            SessionTokenOtherPrincipal: it was minted for another principal.
            PrincipalNotAllowed: the claimed principal is not the token's.
            StorageError: the keys could not be read to verify an echoed token.
        """
        principal = effective_principal(identity, request.principal)
        echoed = request.session_token
        answer = request.mint_session or echoed is not None
        sealing = Sealing(self, identity.tenant, principal, answer)
        if echoed is None:
            return request, sealing
        signer = self._keys.made(session_signer)
        if signer is None:
            return replace(request, session_token=None), sealing
        minted = MintedSession.from_compact(signer.open(echoed))
        if minted is None or minted.tenant != identity.tenant:
            raise SessionTokenInvalid(request.tool)
        if minted.principal != principal:
            raise SessionTokenOtherPrincipal(request.tool, minted.principal, principal)
        if minted.expires_ms <= self._clock():
            # Idle for a whole timeout: that session has ended; this call starts another.
            return replace(request, session_token=None), sealing
        return replace(request, session_id=minted.session_id), sealing

    def mint(self, tenant: str, session_id: str, principal: str) -> str | None:
        """A token for the session, expiring one idle timeout from now; None without a
        key (or when the keys cannot be read: the answer is given without one)."""
        try:
            signer = self._keys.made(session_signer)
        except StorageError as exc:
            logger.warning("session tokens: the keys could not be read", extra={"error": exc.doing})
            return None
        if signer is None:
            return None
        expires = self._clock() + self._idle_ms
        return signer.sign(MintedSession(tenant, session_id, principal, expires).to_compact())


def session_signer(link_keys: list[bytes]) -> PurposeSigner:
    """The signer of session tokens made from the link keys (newest first).

    Raises:
        ValueError: no key (a configuration fault).
    """
    return PurposeSigner(SESSION_VERSION, PURPOSE, link_keys)
