"""Bearer-token authentication with a short per-container cache.

The cache keeps an allowed check at one DynamoDB request: a token is looked up at most
once per `token_cache_seconds` (at most 30 s) per container, and API Gateway keeps the
authorizer's answer for `AUTHORIZER_TTL_SECONDS` (30 s): a revocation stops a server
token's checks within 60 s. An expiry stops them at once: neither cache keeps a token
past its expiry (the container's cache ends there, and the route refuses an answer the
gateway kept past it). An admin token is looked up `fresh`, past both caches, on every
route, so a revoked or expired admin token answers 401 at once.

A JSON Web Token of the configured identity provider (`chalicelib.auth.oidc`) is verified
instead, never cached here: its signature, issuer, audience and expiry are checked on
every look-up, which costs one RSA public-key operation.

One header shape is accepted, `Bearer <token>`: the scheme in any ASCII case (RFC 9110
§11.1 makes it case-insensitive), one space, a token with no whitespace around or in it.
WAF's per-token rate key lowercases the header and compresses its whitespace, so every
header accepted for one token falls in one rate bucket (docs/operations.md, "Tenant
isolation").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chalicelib.auth.jwt import looks_like_jwt
from chalicelib.auth.oidc import SignInRefused
from chalicelib.auth.tokens import (
    ADMIN,
    ANY_PRINCIPAL,
    SERVER,
    Identity,
    identity_of,
    matches,
    split_token,
)
from chalicelib.clock import Clock
from chalicelib.settings import Settings
from chalicelib.storage.ports import TokenRepository

if TYPE_CHECKING:
    from chalicelib.auth.oidc import OidcVerifier

SCHEME = "bearer"  # compared case-folded, ASCII only
# RFC 6750's b64token: what WAF's address rule treats as a well-formed header too.
B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
AUTHORIZER_TTL_SECONDS = 30
"""How long API Gateway keeps the authorizer's answer; with the per-container cache
(`Settings.token_cache_seconds`, at most `TOKEN_CACHE_MAX_SECONDS`), the bound of 60 s."""
USAGE_KEY_PREFIX = "mcp-quota-"
UNVERIFIED_USAGE_KEY = "unverified"


def bearer_token(header: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` value, or None for any other shape."""
    scheme, space, token = header.partition(" ")
    if not scheme.isascii() or scheme.lower() != SCHEME or not space:
        return None
    return token if B64TOKEN.fullmatch(token) else None


def usage_key(scope: str, tenant: str | None) -> str:
    """The API key value API Gateway meters a tenant's requests under (its usage plan):
    public, never sent by a client (the key source is the authorizer); None is the one
    shared by requests the authorizer could not attribute to a tenant."""
    name = f"tenant-{tenant}" if tenant is not None else UNVERIFIED_USAGE_KEY
    return f"{USAGE_KEY_PREFIX}{scope}-{name}"


@dataclass(frozen=True)
class AuthResult:
    """The identity behind a token, or why there is none."""

    identity: Identity | None
    reason: str = ""
    refused_role: str | None = None  # a real token's role, when it is revoked or expired
    expires_at_ms: int | None = None  # an accepted token's expiry, if it has one
    signed_in: bool = False  # an identity provider's genuine token, refused for its claims

    @property
    def told_at_route(self) -> bool:
        """Whether the route, not the gateway, refuses it with a 401 and the reason: a
        console caller's real token, which the console then signs in again for."""
        return self.signed_in or self.refused_role not in (None, SERVER)


class Authenticator:
    """Resolves `Authorization` header values to identities."""

    def __init__(
        self,
        settings: Settings,
        tokens: Callable[[], TokenRepository],
        clock: Clock,
        sign_in: Callable[[], OidcVerifier | None] = lambda: None,
    ) -> None:
        self._settings = settings
        self._tokens = tokens
        self._clock = clock
        self._sign_in = sign_in
        self._cache: dict[str, tuple[int, AuthResult]] = {}
        self._dev: dict[str, Identity] = {}
        if settings.dev_tokens:
            tenant = settings.dev_tenant
            self._dev = {
                # The dev server token stands for any MCP server: it may claim any principal.
                settings.dev_server_token: Identity(
                    tenant, SERVER, "dev-server", principals=ANY_PRINCIPAL
                ),
                settings.dev_admin_token: Identity(tenant, ADMIN, "dev-admin"),
            }

    def authenticate(self, header: str, *, fresh: bool = False) -> AuthResult:
        """Resolve a header value such as `Bearer mcpq_...`; `fresh` reads the token store
        past the cache (and refreshes the cache with what it read).

        Raises:
            StorageError: the token store failed (`IssuerUnavailable`: the identity
                provider's keys could not be fetched).
        """
        token = bearer_token(header)
        if token is None:
            return AuthResult(None, "the Authorization header is not 'Bearer <token>'")
        if token in self._dev:
            return AuthResult(self._dev[token])
        if looks_like_jwt(token):
            return self._signed_in(token)
        now = self._clock()
        cached = self._cache.get(token)
        if not fresh and cached is not None and cached[0] > now:
            return cached[1]
        result, expires_at_ms = self._lookup(token, now)
        if self._settings.token_cache_seconds > 0:
            if len(self._cache) > 10_000:
                self._cache.clear()
            expiry = now + self._settings.token_cache_seconds * 1000
            if expires_at_ms is not None:
                expiry = min(expiry, expires_at_ms)  # an expiring token is not kept past it
            self._cache[token] = (expiry, result)
        return result

    def _signed_in(self, token: str) -> AuthResult:
        verifier = self._sign_in()
        if verifier is None:
            return AuthResult(None, "unknown token (no identity provider is configured)")
        try:
            return AuthResult(verifier.verify(token).identity)
        except SignInRefused as exc:
            return AuthResult(None, exc.reason, signed_in=exc.signed)

    def _lookup(self, token: str, now_ms: int) -> tuple[AuthResult, int | None]:
        token_id = split_token(token)
        if token_id is None:
            return AuthResult(None, "unknown token"), None
        record = self._tokens().get(token_id)
        if record is None or not matches(record, token):
            return AuthResult(None, "unknown token"), None
        if record.revoked:
            return AuthResult(None, "revoked token", record.role), None
        if record.expired(now_ms):
            return AuthResult(None, "expired token", record.role), None
        return AuthResult(identity_of(record), expires_at_ms=record.expires_at_ms), (
            record.expires_at_ms
        )
