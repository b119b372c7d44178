"""One signing scheme for what the service hands a client to send back unchanged (hold
tickets, minted sessions): `<version>-<key id>.<payload>.<signature>`, the payload
compact JSON in URL-safe base64, the signature an HMAC-SHA256 of the first two parts
under the key the id names, each kind's key made from the link keys for its purpose.
The email links (`links/signing.py`) write the same format under the link keys
themselves; `seal` and `unseal` are theirs to use too.

What a token binds, and when it expires, is its kind's business (`check/tickets.py`,
`check/minted.py`); `KeyRing` holds the keys they are made from.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

KEY_ID_LENGTH = 8
MAX_TOKEN = 2048


def b64(raw: bytes) -> str:
    """URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def unb64(text: str) -> bytes:
    """The bytes of `b64`.

    Raises:
        binascii.Error: not base64.
    """
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def mac(key: bytes, body: str) -> str:
    """The signature of a token's first two parts."""
    return b64(hmac.new(key, body.encode("ascii"), hashlib.sha256).digest())


def seal(label: str, key: bytes, payload: Mapping[str, Any]) -> str:
    """A token: `label` (`<version>-<key id>`), the payload, the signature of both."""
    compact = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    body = f"{label}.{b64(compact.encode('utf-8'))}"
    return f"{body}.{mac(key, body)}"


def unseal(
    token: str, keys_for: Callable[[str], Sequence[bytes]], limit: int = MAX_TOKEN
) -> dict[str, Any] | None:
    """The payload of a token signed by one of the keys `keys_for(label)` names, or None
    (not a token, not signed by any of them, or not a JSON object)."""
    if len(token) > limit or not token.isascii() or token.count(".") != 2:
        return None
    label, encoded, signature = token.split(".")
    body = f"{label}.{encoded}"
    if not any(hmac.compare_digest(mac(key, body), signature) for key in keys_for(label)):
        return None
    try:
        payload = json.loads(unb64(encoded))
    except (binascii.Error, ValueError):
        return None
    return payload if isinstance(payload, dict) else None


def purpose_key(link_key: bytes, purpose: bytes) -> bytes:
    """A key for one kind of token, made from a link key: an HMAC of a fixed label under
    it, so no token of one kind is ever a token of another."""
    return hmac.new(link_key, purpose, hashlib.sha256).digest()


class PurposeSigner:
    """Signs one kind of token with the newest key and opens it with any key held; each
    key made from a link key for this purpose (`purpose_key`)."""

    def __init__(self, version: str, purpose: bytes, link_keys: Sequence[bytes]) -> None:
        """`link_keys`, newest first.

        Raises:
            ValueError: no key (a configuration fault).
        """
        if not link_keys:
            raise ValueError(f"{purpose.decode('ascii', 'replace')} needs at least one link key")
        keys = [purpose_key(key, purpose) for key in link_keys]
        self._version = version
        self._keys = {self._key_id(key): key for key in reversed(keys)}
        self._current = self._key_id(keys[0])

    @staticmethod
    def _key_id(key: bytes) -> str:
        return hmac.new(key, b"id", hashlib.sha256).hexdigest()[:KEY_ID_LENGTH]

    def sign(self, payload: Mapping[str, Any]) -> str:
        """The token of `payload`, under the newest key."""
        return seal(f"{self._version}-{self._current}", self._keys[self._current], payload)

    def open(self, token: str) -> dict[str, Any] | None:
        """The payload of a genuine token of this kind, or None."""
        return unseal(token, self._keys_for)

    def _keys_for(self, label: str) -> list[bytes]:
        prefix, _, kid = label.partition("-")
        key = self._keys.get(kid) if prefix == self._version else None
        return [] if key is None else [key]


class KeyRing:
    """The link keys, read again every `every_ms`, and the signers made from them (made
    anew when the keys are read again), so one read serves every kind of token."""

    def __init__(
        self, read: Callable[[], list[bytes]], clock: Callable[[], int], every_ms: int
    ) -> None:
        self._read = read
        self._clock = clock
        self._every_ms = every_ms
        self._keys: list[bytes] = []
        self._read_at: int | None = None
        self._made: dict[object, Any] = {}

    def keys(self) -> list[bytes]:
        """The keys, newest first (re-read when they are older than `every_ms`).

        Raises:
            StorageError: the keys could not be read.
        """
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._every_ms:
            self._keys, self._read_at, self._made = self._read(), now, {}
        return self._keys

    def made(self, make: Callable[[list[bytes]], T]) -> T | None:
        """What `make` makes of the current keys (made once per read); None without keys.

        Raises:
            StorageError: the keys could not be read.
        """
        keys = self.keys()
        if not keys:
            return None
        if make not in self._made:
            self._made[make] = make(keys)
        made: T = self._made[make]
        return made
