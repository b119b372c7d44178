"""Bearer-token authentication with a short per-container cache.

The cache keeps an allowed check at one DynamoDB request: a token is looked up at most
once per `token_cache_seconds` per container, so a revocation takes effect within that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chalicelib.clock import Clock
from chalicelib.ports import TokenRepository
from chalicelib.settings import Settings
from chalicelib.tokens import ADMIN, SERVER, Identity, matches, split_token

BEARER = "bearer "


@dataclass(frozen=True)
class AuthResult:
    """The identity behind a token, or why there is none."""

    identity: Identity | None
    reason: str = ""


class Authenticator:
    """Resolves `Authorization` header values to identities."""

    def __init__(
        self, settings: Settings, tokens: Callable[[], TokenRepository], clock: Clock
    ) -> None:
        self._settings = settings
        self._tokens = tokens
        self._clock = clock
        self._cache: dict[str, tuple[int, AuthResult]] = {}
        self._dev: dict[str, Identity] = {}
        if settings.dev_tokens:
            tenant = settings.dev_tenant
            self._dev = {
                # The local dev server token may claim any principal.
                settings.dev_server_token: Identity(tenant, SERVER, "dev-server", "", ("*",)),
                settings.dev_admin_token: Identity(tenant, ADMIN, "dev-admin"),
            }

    def authenticate(self, header: str) -> AuthResult:
        """Resolve a header value such as `Bearer mcpq_...`.

        Raises:
            StorageError: the token store failed.
        """
        if header[: len(BEARER)].lower() != BEARER:
            return AuthResult(None, "the Authorization header is not 'Bearer <token>'")
        token = header[len(BEARER) :].strip()
        if token in self._dev:
            return AuthResult(self._dev[token])
        now = self._clock()
        cached = self._cache.get(token)
        if cached is not None and cached[0] > now:
            return cached[1]
        result = self._lookup(token)
        if self._settings.token_cache_seconds > 0:
            if len(self._cache) > 10_000:
                self._cache.clear()
            expiry = now + self._settings.token_cache_seconds * 1000
            self._cache[token] = (expiry, result)
        return result

    def _lookup(self, token: str) -> AuthResult:
        token_id = split_token(token)
        if token_id is None:
            return AuthResult(None, "unknown token")
        record = self._tokens().get(token_id)
        if record is None or not matches(record, token):
            return AuthResult(None, "unknown token")
        if record.revoked:
            return AuthResult(None, "revoked token")
        return AuthResult(record.identity())
