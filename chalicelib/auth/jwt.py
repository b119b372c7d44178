"""RS256 JSON Web Tokens: parse, verify the signature against a key set, check the claims.

Pure (no network, no clock of its own). RSASSA-PKCS1-v1_5 with SHA-256 (RFC 8017, 8.2.2)
is written with Python integers: the verifier rebuilds the whole EMSA-PKCS1-v1_5 encoding
of the expected digest and compares it with the recovered one in constant time, so no
parser of the recovered block exists to be fooled (Bleichenbacher's e=3 forgery needs
one). Only RS256 is accepted: `none`, HS256 and every other `alg` are refused before any
key is looked at, so a public key can never serve as an HMAC secret.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

ALGORITHM = "RS256"
MAX_TOKEN_CHARS = 16_384
MIN_KEY_BITS = 2048
LEEWAY_SECONDS = 30  # clock skew tolerated on `exp`, `nbf` and `iat`
# DER of DigestInfo{sha256, NULL} before the 32-byte digest (RFC 8017, 9.2, note 1).
SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")
_B64URL = re.compile(r"^[A-Za-z0-9_-]*$")


class Refusal(StrEnum):
    """Why a token is not accepted (said in the 401's message and the log)."""

    MALFORMED = "malformed token"
    ALGORITHM = "algorithm not RS256"
    UNKNOWN_KEY = "unknown signing key"
    SIGNATURE = "bad signature"
    ISSUER = "wrong issuer"
    AUDIENCE = "wrong audience"
    EXPIRED = "expired token"
    NOT_YET_VALID = "token not yet valid"
    TOKEN_USE = "wrong token_use"


class TokenRefused(Exception):
    """A token that is not accepted; `signed` says whether its signature verified."""

    def __init__(self, refusal: Refusal, signed: bool = False) -> None:
        super().__init__(refusal.value)
        self.refusal = refusal
        self.signed = signed


@dataclass(frozen=True)
class RsaKey:
    """An RSA public key of the issuer's key set."""

    n: int
    e: int


@dataclass(frozen=True)
class Unverified:
    """A token split into its parts, its signature not yet checked."""

    kid: str
    signing_input: bytes
    signature: bytes
    claims: dict[str, Any]


@dataclass(frozen=True)
class Expected:
    """What a token must say about itself to be accepted."""

    issuer: str
    audience: str


def b64url_decode(text: str) -> bytes:
    """Strict base64url without padding (RFC 7515, 2).

    Raises:
        TokenRefused: not base64url.
    """
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise TokenRefused(Refusal.MALFORMED)
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise TokenRefused(Refusal.MALFORMED) from exc


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise TokenRefused(Refusal.MALFORMED) from exc
    if not isinstance(value, dict):
        raise TokenRefused(Refusal.MALFORMED)
    return value


def looks_like_jwt(token: str) -> bool:
    """Whether a bearer value has a JWT's shape (three base64url parts)."""
    parts = token.split(".")
    return len(parts) == 3 and all(part and _B64URL.fullmatch(part) for part in parts)


def parse(token: str) -> Unverified:
    """Split a compact JWS and read its header and claims; refuse any `alg` but RS256.

    Raises:
        TokenRefused: malformed, or not RS256 (`none` and HS256 included).
    """
    if len(token) > MAX_TOKEN_CHARS or not looks_like_jwt(token):
        raise TokenRefused(Refusal.MALFORMED)
    header_b64, claims_b64, signature_b64 = token.split(".")
    header = _json_object(b64url_decode(header_b64))
    if header.get("alg") != ALGORITHM:
        raise TokenRefused(Refusal.ALGORITHM)
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid or "crit" in header:
        raise TokenRefused(Refusal.MALFORMED)
    claims = _json_object(b64url_decode(claims_b64))
    signing_input = f"{header_b64}.{claims_b64}".encode("ascii")
    return Unverified(kid, signing_input, b64url_decode(signature_b64), claims)


def rsa_key(jwk: Mapping[str, Any]) -> RsaKey | None:
    """An RS256 signing key from a JWK; None for any other kind of key or a weak one."""
    if jwk.get("kty") != "RSA" or jwk.get("use", "sig") != "sig":
        return None
    if jwk.get("alg", ALGORITHM) != ALGORITHM:
        return None
    n_b64, e_b64 = jwk.get("n"), jwk.get("e")
    if not isinstance(n_b64, str) or not isinstance(e_b64, str):
        return None
    try:
        n = int.from_bytes(b64url_decode(n_b64), "big")
        e = int.from_bytes(b64url_decode(e_b64), "big")
    except TokenRefused:
        return None
    if n.bit_length() < MIN_KEY_BITS or e < 3 or e % 2 == 0:
        return None
    return RsaKey(n, e)


def key_set(jwks: Mapping[str, Any]) -> dict[str, RsaKey]:
    """The usable keys of a JWKS document, by `kid`."""
    keys: dict[str, RsaKey] = {}
    for jwk in jwks.get("keys", []) if isinstance(jwks.get("keys"), list) else []:
        if isinstance(jwk, dict) and isinstance(jwk.get("kid"), str):
            key = rsa_key(jwk)
            if key is not None:
                keys[jwk["kid"]] = key
    return keys


def rs256_valid(key: RsaKey, message: bytes, signature: bytes) -> bool:
    """RSASSA-PKCS1-v1_5-VERIFY with SHA-256 (RFC 8017, 8.2.2)."""
    k = (key.n.bit_length() + 7) // 8
    if len(signature) != k:
        return False
    s = int.from_bytes(signature, "big")
    if s >= key.n:
        return False
    recovered = pow(s, key.e, key.n).to_bytes(k, "big")
    t = SHA256_DIGEST_INFO + hashlib.sha256(message).digest()
    expected = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
    return hmac.compare_digest(recovered, expected)


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TokenRefused(Refusal.MALFORMED, signed=True)
    return float(value)


def check_claims(claims: Mapping[str, Any], expected: Expected, now_ms: int) -> None:
    """The claims of a signed token: issuer, audience (or a Cognito access token's
    `client_id`), `token_use`, expiry and not-before, with `LEEWAY_SECONDS` of skew.

    Raises:
        TokenRefused: a claim is missing or says otherwise (`signed` is set).
    """
    if claims.get("iss") != expected.issuer:
        raise TokenRefused(Refusal.ISSUER, signed=True)
    token_use = claims.get("token_use")
    if token_use not in (None, "id", "access"):
        raise TokenRefused(Refusal.TOKEN_USE, signed=True)
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    # A Cognito access token names its app client in `client_id` and has no `aud`.
    by_client = token_use == "access" and audience is None
    if by_client and claims.get("client_id") != expected.audience:
        raise TokenRefused(Refusal.AUDIENCE, signed=True)
    if not by_client and expected.audience not in audiences:
        raise TokenRefused(Refusal.AUDIENCE, signed=True)
    now = now_ms / 1000
    expires = _number(claims, "exp")
    if expires is None:
        raise TokenRefused(Refusal.MALFORMED, signed=True)
    if now >= expires + LEEWAY_SECONDS:
        raise TokenRefused(Refusal.EXPIRED, signed=True)
    for name in ("nbf", "iat"):
        at = _number(claims, name)
        if at is not None and at > now + LEEWAY_SECONDS:
            raise TokenRefused(Refusal.NOT_YET_VALID, signed=True)


def verify(
    token: Unverified, keys: Mapping[str, RsaKey], expected: Expected, now_ms: int
) -> dict[str, Any]:
    """The claims of a token whose signature and claims hold.

    Raises:
        TokenRefused: the key is unknown, the signature or a claim is wrong.
    """
    key = keys.get(token.kid)
    if key is None:
        raise TokenRefused(Refusal.UNKNOWN_KEY)
    if not rs256_valid(key, token.signing_input, token.signature):
        raise TokenRefused(Refusal.SIGNATURE)
    check_claims(token.claims, expected, now_ms)
    return token.claims
