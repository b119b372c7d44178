"""An identity provider's tokens: RS256 verified with the issuer's keys (fetched, kept,
fetched again on an unknown key id within a bound), issuer, audience, expiry with
leeway, `token_use`, and the groups that name a tenant and a role. Keys are made and
tokens signed with `cryptography` (a test dependency; the service's verifier uses none)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest
from local_issuer import SigningKey, b64url

from chalicelib.auth import jwt
from chalicelib.auth.oidc import (
    UNKNOWN_KID_REFETCH_MS,
    IssuerKeys,
    IssuerUnavailable,
    OidcVerifier,
    SignInRefused,
)
from chalicelib.auth.roles import Permission, may, refusal
from tests.support import FixedClock

ISSUER = "https://issuer.example"
CLIENT = "console-client"
JWKS_URI = f"{ISSUER}/keys"


class FakeIssuer:
    """The issuer's documents, served to the verifier's fetch, and the fetches counted."""

    def __init__(self, *keys: SigningKey) -> None:
        self.keys = list(keys)
        self.fetches: list[str] = []
        self.down = False

    def __call__(self, url: str) -> dict[str, Any]:
        self.fetches.append(url)
        if self.down:
            raise IssuerUnavailable("fetching the sign-in issuer's keys")
        if url == f"{ISSUER}/.well-known/openid-configuration":
            return {"issuer": ISSUER, "jwks_uri": JWKS_URI}
        assert url == JWKS_URI
        return {"keys": [key.jwk() for key in self.keys]}

    def key_fetches(self) -> int:
        return self.fetches.count(JWKS_URI)


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey("k1")


@pytest.fixture(scope="module")
def other_key() -> SigningKey:
    return SigningKey("k2")


def claims(clock: FixedClock, **changes: Any) -> dict[str, Any]:
    now = clock() // 1000
    base = {
        "iss": ISSUER,
        "aud": CLIENT,
        "sub": "u-1",
        "email": "ada@acme.example",
        "token_use": "id",
        "iat": now,
        "exp": now + 3600,
        "cognito:groups": ["staff", "mcp-quota:acme:operator"],
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def verifier(issuer: FakeIssuer, clock: FixedClock) -> OidcVerifier:
    keys = IssuerKeys(ISSUER, issuer, clock)
    return OidcVerifier(keys, jwt.Expected(ISSUER, CLIENT), "cognito:groups", clock)


def refused(verify: OidcVerifier, token: str) -> SignInRefused:
    with pytest.raises(SignInRefused) as caught:
        verify.verify(token)
    return caught.value


def test_a_good_id_token_names_the_tenant_role_and_person(
    key: SigningKey, clock: FixedClock
) -> None:
    verified = verifier(FakeIssuer(key), clock).verify(key.sign(claims(clock)))

    assert (verified.identity.tenant, verified.identity.role) == ("acme", "operator")
    assert verified.identity.name == "ada@acme.example"
    assert verified.identity.actor == "user:ada@acme.example (operator)"


def test_a_cognito_access_token_is_matched_by_its_client_id(
    key: SigningKey, clock: FixedClock
) -> None:
    """Defect class: an access token (no `aud`) refused, or accepted for any client."""
    verify = verifier(FakeIssuer(key), clock)
    access = claims(clock, aud=None, token_use="access", client_id=CLIENT)
    assert verify.verify(key.sign(access)).identity.role == "operator"

    other = claims(clock, aud=None, token_use="access", client_id="another-app")
    assert refused(verify, key.sign(other)).reason == "wrong audience"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"iss": "https://evil.example"}, "wrong issuer"),
        ({"aud": "another-app"}, "wrong audience"),
        ({"aud": ["x", "y"]}, "wrong audience"),
        ({"aud": None}, "wrong audience"),
        ({"token_use": "refresh"}, "wrong token_use"),
        ({"exp": None}, "malformed token"),
    ],
)
def test_a_genuine_token_saying_the_wrong_thing_is_refused(
    key: SigningKey, clock: FixedClock, changes: dict[str, Any], reason: str
) -> None:
    """Defect class: claims not checked once the signature holds."""
    problem = refused(verifier(FakeIssuer(key), clock), key.sign(claims(clock, **changes)))

    assert (problem.reason, problem.signed) == (reason, True)


def test_expiry_allows_a_small_leeway_and_no_more(key: SigningKey, clock: FixedClock) -> None:
    """Defect class: an expired token accepted (or a skewed clock refusing a fresh one)."""
    verify = verifier(FakeIssuer(key), clock)
    token = key.sign(claims(clock, exp=clock() // 1000 + 60))
    clock.advance(60 + jwt.LEEWAY_SECONDS - 1)
    assert verify.verify(token).identity.tenant == "acme"
    clock.advance(1)
    assert refused(verify, token).reason == "expired token"

    early = key.sign(claims(clock, iat=clock() // 1000 + 600))
    assert refused(verify, early).reason == "token not yet valid"


def test_a_tampered_or_foreign_signature_is_refused(
    key: SigningKey, other_key: SigningKey, clock: FixedClock
) -> None:
    """Defect class: a signature not bound to the claims, or to the key of its kid."""
    verify = verifier(FakeIssuer(key), clock)
    header, _, signature = key.sign(claims(clock)).split(".")
    promoted = b64url(
        json.dumps(claims(clock, **{"cognito:groups": ["mcp-quota:acme:admin"]})).encode()
    )
    assert refused(verify, f"{header}.{promoted}.{signature}").reason == "bad signature"

    forged = SigningKey.__new__(SigningKey)
    forged.kid, forged.private = key.kid, other_key.private  # the issuer's kid, not its key
    assert refused(verify, forged.sign(claims(clock))).reason == "bad signature"
    assert refused(verify, f"{header}.{promoted}.{signature[:-8]}").reason == "bad signature"


def test_an_unknown_kid_fetches_the_keys_again_once_within_the_bound(
    key: SigningKey, other_key: SigningKey, clock: FixedClock
) -> None:
    """Defect class: a rotated key refused until the container dies, or every made-up kid
    costing a fetch of the issuer's keys."""
    issuer = FakeIssuer(key)
    verify = verifier(issuer, clock)
    verify.verify(key.sign(claims(clock)))
    assert issuer.key_fetches() == 1

    clock.advance(UNKNOWN_KID_REFETCH_MS / 1000)  # later, the issuer rotates
    issuer.keys.append(other_key)  # the issuer rotates: a new key signs
    assert verify.verify(other_key.sign(claims(clock))).identity.tenant == "acme"
    assert issuer.key_fetches() == 2

    stranger = SigningKey.__new__(SigningKey)
    stranger.kid, stranger.private = "made-up", key.private
    for _ in range(5):
        assert refused(verify, stranger.sign(claims(clock))).reason == "unknown signing key"
    assert issuer.key_fetches() == 2  # within 30 s of the last fetch: none more
    clock.advance(UNKNOWN_KID_REFETCH_MS / 1000)
    refused(verify, stranger.sign(claims(clock)))
    assert issuer.key_fetches() == 3


def test_the_keys_kept_outlive_an_issuer_outage(key: SigningKey, clock: FixedClock) -> None:
    issuer = FakeIssuer(key)
    verify = verifier(issuer, clock)
    verify.verify(key.sign(claims(clock)))
    issuer.down = True
    clock.advance(3601)  # the keys are old: fetched again, which fails

    assert verify.verify(key.sign(claims(clock))).identity.tenant == "acme"


def test_without_any_key_an_issuer_outage_is_unavailable_not_refused(
    key: SigningKey, clock: FixedClock
) -> None:
    issuer = FakeIssuer(key)
    issuer.down = True
    with pytest.raises(IssuerUnavailable):
        verifier(issuer, clock).verify(key.sign(claims(clock)))


def _unsigned(header: dict[str, Any], body: dict[str, Any], signature: bytes) -> str:
    parts = [b64url(json.dumps(header).encode()), b64url(json.dumps(body).encode())]
    return ".".join([*parts, b64url(signature)])


def test_alg_none_and_hs256_with_the_public_key_are_refused(
    key: SigningKey, clock: FixedClock
) -> None:
    """Defect class: algorithm confusion (an unsigned token, or the public key used as an
    HMAC secret) accepted."""
    verify = verifier(FakeIssuer(key), clock)
    body = claims(clock, **{"cognito:groups": ["mcp-quota:acme:admin"]})
    none = _unsigned({"alg": "none", "kid": key.kid}, body, b"")
    assert refused(verify, none + "x").reason == "algorithm not RS256"

    header = {"alg": "HS256", "kid": key.kid}
    signing_input = _unsigned(header, body, b"").rsplit(".", 1)[0]
    secret = json.dumps(key.jwk()).encode()
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    assert refused(verify, f"{signing_input}.{b64url(mac)}").reason == "algorithm not RS256"

    lower = {"alg": "rs256", "kid": key.kid}
    assert refused(verify, _unsigned(lower, body, b"x")).reason == "algorithm not RS256"


@pytest.mark.parametrize(
    "token",
    ["", "a.b", "a.b.c.d", "!!.e30.x", f"{b64url(b'[1]')}.e30.x", "a" * 20_000 + ".b.c"],
)
def test_malformed_tokens_are_refused_as_malformed(
    key: SigningKey, clock: FixedClock, token: str
) -> None:
    assert refused(verifier(FakeIssuer(key), clock), token).reason == "malformed token"


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        (["mcp-quota:acme:viewer", "mcp-quota:acme:admin"], ("acme", "admin")),
        ("mcp-quota:acme:viewer other", ("acme", "viewer")),
        (["mcp-quota:acme:server"], None),  # a person is never a server
        (["mcp-quota:Acme!:admin"], None),  # not a tenant name
        (["mcp-quota:acme:admin", "mcp-quota:beta:viewer"], None),  # two tenants
        ([], None),
    ],
)
def test_groups_name_one_tenant_and_the_strongest_role(
    key: SigningKey, clock: FixedClock, groups: Any, expected: tuple[str, str] | None
) -> None:
    verify = verifier(FakeIssuer(key), clock)
    token = key.sign(claims(clock, **{"cognito:groups": groups}))
    if expected is None:
        problem = refused(verify, token)
        assert problem.signed
        assert problem.reason.startswith("signed in, but")
        return
    identity = verify.verify(token).identity
    assert (identity.tenant, identity.role) == expected


def test_the_verification_is_full_pkcs1_v1_5_encoding(key: SigningKey) -> None:
    """Defect class: a verifier that parses the recovered block (Bleichenbacher's forgery
    with garbage after the digest) instead of comparing the whole encoding."""
    public = jwt.key_set({"keys": [key.jwk()]})[key.kid]
    message = b"header.claims"
    signature = base64.urlsafe_b64decode(key.sign({}).split(".")[2] + "==")
    assert not jwt.rs256_valid(public, message, signature)  # signed other bytes
    k = (public.n.bit_length() + 7) // 8
    assert not jwt.rs256_valid(public, message, b"\x00" * k)
    assert not jwt.rs256_valid(public, message, public.n.to_bytes(k, "big"))
    assert not jwt.rs256_valid(public, message, b"\x01" * (k - 1))


def test_each_role_may_what_it_should() -> None:
    assert [p for p in Permission if may("viewer", p)] == [Permission.READ]
    assert may("operator", Permission.ACT) and not may("operator", Permission.MANAGE)
    assert all(may("admin", p) for p in Permission)
    assert [p for p in Permission if may("server", p)] == [Permission.CHECK]
    assert not any(may("owner", p) for p in Permission)
    assert "A viewer may only read" in refusal("viewer", Permission.ACT)
