"""Bearer tokens: format, hashing and roles. Tokens are stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from fnmatch import fnmatchcase

from chalicelib.errors import PrincipalNotAllowed

SERVER = "server"
ADMIN = "admin"
ROLES = (SERVER, ADMIN)
TOKEN_PREFIX = "mcpq"
TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_TOKEN = re.compile(r"^mcpq_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")


@dataclass(frozen=True)
class Identity:
    """Who is calling: resolved by the authorizer from the bearer token."""

    tenant: str
    role: str
    token_id: str
    name: str = ""
    principals: tuple[str, ...] = ()  # the principals it may claim: names or * patterns

    @property
    def own_principal(self) -> str:
        """The principal of a check that claims none: the token itself."""
        return f"token:{self.token_id}"

    def may_claim(self, principal: str) -> bool:
        """Whether this token is bound to a principal matching `principal`."""
        return any(fnmatchcase(principal, pattern) for pattern in self.principals)


def effective_principal(identity: Identity, claimed: str | None) -> str:
    """Whom a check acts for: the claimed principal if the token may claim it, else (no
    claim) the token's own identity, so fresh session ids from one server still meet
    one principal budget.

    Raises:
        PrincipalNotAllowed: the claim is outside the token's binding.
    """
    if claimed is None:
        return identity.own_principal
    if identity.may_claim(claimed) or claimed == identity.own_principal:
        return claimed
    bound = ", ".join(repr(p) for p in identity.principals) or "none"
    raise PrincipalNotAllowed(
        f"Token {identity.token_id} may not act for principal {claimed!r}: its allowed "
        f"principals are {bound}. Send no principal (the token's own is used), or have an "
        "administrator bind the principal to this token."
    )


@dataclass(frozen=True)
class TokenRecord:
    """A stored token: its public id, the hash of the secret, and its grants."""

    token_id: str
    secret_hash: str
    tenant: str
    role: str
    name: str
    created_at_ms: int
    revoked_at_ms: int | None = None
    principals: tuple[str, ...] = ()

    @property
    def revoked(self) -> bool:
        """Whether the token has been revoked."""
        return self.revoked_at_ms is not None

    def identity(self) -> Identity:
        """The identity this token authenticates."""
        return Identity(self.tenant, self.role, self.token_id, self.name, self.principals)


def hash_secret(token: str) -> str:
    """SHA-256 of the whole token: tokens carry 256 bits of randomness, so no slow KDF."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def split_token(token: str) -> str | None:
    """The public token id of a well-formed token, or None."""
    match = _TOKEN.fullmatch(token)
    return match.group(1) if match else None


def matches(record: TokenRecord, token: str) -> bool:
    """Constant-time comparison of a presented token with a stored hash."""
    return hmac.compare_digest(record.secret_hash, hash_secret(token))


def new_token() -> tuple[str, str]:
    """Generate (token_id, token). The token is shown once and never stored."""
    token_id = secrets.token_hex(6)
    return token_id, f"{TOKEN_PREFIX}_{token_id}_{secrets.token_urlsafe(32)}"
