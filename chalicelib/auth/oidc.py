"""Sign-in through an OpenID Connect issuer (a Cognito user pool or another): its discovery
document and signing keys, fetched and kept per container, and the verification of its
tokens into an `Identity`.

Keys are fetched on first use and again after `KEYS_MAX_AGE_MS`; a token signed with a
key id the container does not know fetches them again at most once per
`UNKNOWN_KID_REFETCH_MS`, so a rotation is picked up at once and a flood of made-up key ids
costs the issuer one request a half-minute.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chalicelib.auth import jwt
from chalicelib.auth.roles import NoMembership, membership, person_name
from chalicelib.auth.tokens import Identity
from chalicelib.clock import Clock
from chalicelib.lazy import lazy_module
from chalicelib.storage.errors import StoreUnavailable

if TYPE_CHECKING:
    import urllib.request as urllib_request
else:  # only a container that fetches an issuer's keys pays for http.client and ssl
    urllib_request = lazy_module("urllib.request")

KEYS_MAX_AGE_MS = 3600 * 1000
UNKNOWN_KID_REFETCH_MS = 30 * 1000
FETCH_TIMEOUT_SECONDS = 2.0
MAX_DOCUMENT_BYTES = 256 * 1024
PERSON_ID_PREFIX = "user:"  # an identity's token_id for a signed-in person: user:<name>

Fetch = Callable[[str], dict[str, Any]]


class IssuerUnavailable(StoreUnavailable):
    """The issuer's discovery document or keys could not be fetched. A `StoreUnavailable`,
    so the authorizer lets the request through unverified and the route answers 503 with
    Retry-After, as it does while the token store is down."""


def fetch_json(url: str) -> dict[str, Any]:
    """GET a JSON object over HTTP(S), within FETCH_TIMEOUT_SECONDS.

    Raises:
        IssuerUnavailable: unreachable, an error status, or not a JSON object.
    """
    if not url.startswith(("https://", "http://")):
        raise IssuerUnavailable("fetching the sign-in issuer's keys")
    request = urllib_request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib_request.urlopen(request, timeout=FETCH_TIMEOUT_SECONDS) as answer:
            value = json.loads(answer.read(MAX_DOCUMENT_BYTES))
    except (OSError, ValueError) as exc:
        raise IssuerUnavailable("fetching the sign-in issuer's keys") from exc
    if not isinstance(value, dict):
        raise IssuerUnavailable("fetching the sign-in issuer's keys")
    return value


@dataclass(frozen=True)
class Endpoints:
    """What the console needs to sign a person in (from the discovery document)."""

    authorization_endpoint: str
    token_endpoint: str


class IssuerKeys:
    """An issuer's discovery document and signing keys, kept per container."""

    def __init__(self, issuer: str, fetch: Fetch, clock: Clock) -> None:
        self._issuer = issuer
        self._fetch = fetch
        self.clock = clock
        self._discovery: dict[str, Any] | None = None
        self.keys: dict[str, jwt.RsaKey] = {}
        self._fetched_at: int | None = None

    def discovery(self) -> dict[str, Any]:
        """The issuer's OpenID configuration, fetched once.

        Raises:
            IssuerUnavailable: it could not be fetched, or names another issuer.
        """
        if self._discovery is None:
            found = self._fetch(f"{self._issuer}/.well-known/openid-configuration")
            if found.get("issuer") != self._issuer or not isinstance(found.get("jwks_uri"), str):
                raise IssuerUnavailable("reading the sign-in issuer's discovery document")
            self._discovery = found
        return self._discovery

    def endpoints(self) -> Endpoints:
        """The issuer's authorization and token endpoints.

        Raises:
            IssuerUnavailable: the discovery document could not be fetched or lacks them.
        """
        found = self.discovery()
        authorize, token = found.get("authorization_endpoint"), found.get("token_endpoint")
        if not isinstance(authorize, str) or not isinstance(token, str):
            raise IssuerUnavailable("reading the sign-in issuer's discovery document")
        return Endpoints(authorize, token)

    def key(self, kid: str) -> jwt.RsaKey | None:
        """The signing key `kid`, fetching the key set when it is old or lacks that key
        (the latter at most once per UNKNOWN_KID_REFETCH_MS).

        Raises:
            IssuerUnavailable: the keys could not be fetched and none are kept.
        """
        now = self.clock()
        stale = self._fetched_at is None or now - self._fetched_at >= KEYS_MAX_AGE_MS
        unknown = kid not in self.keys and (
            self._fetched_at is None or now - self._fetched_at >= UNKNOWN_KID_REFETCH_MS
        )
        if stale or unknown:
            try:
                self.keys = jwt.key_set(self._fetch(self.discovery()["jwks_uri"]))
            except IssuerUnavailable:
                if not self.keys:
                    raise
                # Keep the keys we have: an issuer's outage must not sign everyone out.
            self._fetched_at = now
        return self.keys.get(kid)


@dataclass(frozen=True)
class Verified:
    """A signed-in person's identity, and when their token expires."""

    identity: Identity
    expires_at_ms: int


class SignInRefused(Exception):
    """An identity-provider token that is not accepted; `signed` says whether it is
    genuine (its signature verified) and only its claims or groups are wrong."""

    def __init__(self, reason: str, signed: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.signed = signed


@dataclass(frozen=True, eq=False)
class OidcVerifier:
    """Turns an issuer's ID token (or a Cognito access token) into an `Identity`."""

    keys: IssuerKeys  # the issuer's documents and keys
    expected: jwt.Expected
    groups_claim: str
    clock: Clock

    @property
    def issuer(self) -> str:
        """The issuer this verifier trusts."""
        return self.expected.issuer

    @property
    def client_id(self) -> str:
        """The audience: the console's app client id at the issuer."""
        return self.expected.audience

    def verify(self, token: str) -> Verified:
        """The identity a token names: its signature, issuer, audience, expiry and groups.

        Raises:
            SignInRefused: the token is not accepted.
            IssuerUnavailable: the issuer's keys could not be fetched.
        """
        try:
            parsed = jwt.parse(token)
            key = self.keys.key(parsed.kid)
            keys = {parsed.kid: key} if key else {}
            claims = jwt.verify(parsed, keys, self.expected, self.clock())
        except jwt.TokenRefused as exc:
            raise SignInRefused(exc.refusal.value, exc.signed) from exc
        try:
            member = membership(claims, self.groups_claim)
        except NoMembership as exc:
            raise SignInRefused(f"signed in, but {exc}", signed=True) from exc
        name = person_name(claims)
        identity = Identity(member.tenant, member.role.value, PERSON_ID_PREFIX + name, name)
        return Verified(identity, int(float(claims["exp"]) * 1000))
