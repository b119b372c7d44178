"""Bearer tokens: format, hashing, roles and the principals a token may act for. Tokens
are stored only as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from fnmatch import fnmatchcase

from chalicelib.auth.roles import Role
from chalicelib.errors import PrincipalNotAllowed
from chalicelib.storage.records import TokenRecord

SERVER = Role.SERVER.value
VIEWER = Role.VIEWER.value
OPERATOR = Role.OPERATOR.value
ADMIN = Role.ADMIN.value
ROLES = tuple(role.value for role in Role)  # what a token may be created with
TOKEN_PREFIX = "mcpq"
_TOKEN = re.compile(r"^mcpq_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")
# A token's own principal, when a check claims none. The prefix is reserved: no token may
# claim another token's own principal, whatever its binding.
OWN_PRINCIPAL_PREFIX = "token:"
ANY_PRINCIPAL = ("*",)  # the binding of the local dev server token: any principal


@dataclass(frozen=True)
class Identity:
    """Who is calling: resolved by the authorizer from the bearer token."""

    tenant: str
    role: str
    token_id: str
    name: str = ""
    principals: tuple[str, ...] = ()  # exact names or fnmatch patterns it may act for

    @property
    def actor(self) -> str:
        """Who did it, as the audit trail names an administrator."""
        return f"{self.token_id} ({self.role})"

    @property
    def own_principal(self) -> str:
        """The principal of the token itself: what a check that claims none counts as."""
        return OWN_PRINCIPAL_PREFIX + self.token_id


def identity_of(record: TokenRecord) -> Identity:
    """The identity a stored token authenticates."""
    return Identity(record.tenant, record.role, record.token_id, record.name, record.principals)


def effective_principal(identity: Identity, claimed: str | None) -> str:
    """The principal a check counts as: the claimed one if the token is bound to it, else
    with no claim the token's own (`token:<id>`).

    Raises:
        PrincipalNotAllowed: the claim matches none of the token's principals, or names
            another token's own principal.
    """
    own = identity.own_principal
    if claimed is None or claimed == own:
        return own
    if not claimed.startswith(OWN_PRINCIPAL_PREFIX) and any(
        fnmatchcase(claimed, pattern) for pattern in identity.principals
    ):
        return claimed
    raise PrincipalNotAllowed(identity.token_id, claimed, identity.principals)


def encode_principals(principals: tuple[str, ...]) -> str:
    """A token's principals as one string (an authorizer's context holds only strings)."""
    return json.dumps(list(principals), separators=(",", ":"))


def decode_principals(raw: str | None) -> tuple[str, ...]:
    """The principals `encode_principals` encoded; none for a context without them."""
    if not raw:
        return ()
    return tuple(str(p) for p in json.loads(raw))


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
