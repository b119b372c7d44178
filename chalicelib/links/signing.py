"""Signed one-click actions for the exhaustion email and the approval email: a compact
payload (tenant, session, action, category, amount, link id, expiry; for an approve or
deny link the approval's id) signed with HMAC-SHA256 under a per-deployment key.
Verifying a link is pure: a clock is passed in; the single use lives in a store.

Keys rotate: a token names the id of the key that signed it (`v2-<key id>`), the newest
key signs, and every key still held verifies, so during a rotation the current and the
previous key are both valid (docs/operations.md, "Link key rotation"). A link lives 24 h
at most (an approval's links as long as the approval, within that):
rotations at least two days apart never break a link already sent. A leaked key is
withdrawn from the secret, and a signer re-read without it neither signs nor verifies
with it. Tokens from before key ids (`v1`) are retired: one could have been signed with
any key ever held, a withdrawn one included."""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib import signed
from chalicelib.admin.audit import LINK_ROLE
from chalicelib.auth.tokens import Identity

LINK_TTL_MS = 24 * 3600 * 1000
LINK_ACTOR = "email-link"  # the audit actor of every action taken through a link
_RETIRED = "v1"  # before key ids: no longer accepted (LinkProblem.RETIRED)
_VERSION = "v2"
MAX_TOKEN = 2048
KEY_ID_LENGTH = 8
RELOAD_AFTER_MS = 60_000  # an unknown key id re-reads the keys at most once a minute


class LinkAction(enum.StrEnum):
    """What a link does when confirmed."""

    RAISE = "raise"  # raise the session's category by `amount`
    SUSPEND = "suspend"  # suspend the session
    SUSPEND_PRINCIPAL = "suspend_principal"  # suspend whom the session's agent acts for
    APPROVE = "approve"  # approve one pending approval of a call (issue 32)
    DENY = "deny"  # deny it


# The actions that decide an approval: their links expire with it, not after LINK_TTL_MS.
APPROVAL_ACTIONS = frozenset({LinkAction.APPROVE, LinkAction.DENY})


class LinkProblem(enum.StrEnum):
    """Why a link cannot be used: its answer is 403 (tampered) or 410 (expired, retired)."""

    TAMPERED = "tampered"  # or signed by a key no longer held (withdrawn after a leak)
    EXPIRED = "expired"
    RETIRED = "retired"  # a version-less (v1) link: from before key ids


@dataclass(frozen=True)
class LinkPayload:
    """What a link is bound to; the signature covers every field."""

    tenant: str
    session_id: str
    action: LinkAction
    category: str
    amount: int
    link_id: str
    expires_ms: int
    principal: str | None = None
    limit: int | None = None  # the category's limit when the email was sent
    started_ms: int | None = None  # when the session's counters then had started
    approval_id: str | None = None  # an approve or deny link: the approval it decides

    @property
    def sent_ms(self) -> int:
        """When the link was signed (it lives LINK_TTL_MS)."""
        return self.expires_ms - LINK_TTL_MS

    def to_compact(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "t": self.tenant,
            "s": self.session_id,
            "a": self.action.value,
            "c": self.category,
            "n": self.amount,
            "i": self.link_id,
            "e": self.expires_ms // 1000,
        }
        if self.principal is not None:
            out["p"] = self.principal
        if self.limit is not None:
            out["l"] = self.limit
        if self.started_ms is not None:
            out["g"] = self.started_ms
        if self.approval_id is not None:
            out["v"] = self.approval_id
        return out

    @classmethod
    def from_compact(cls, raw: Mapping[str, Any]) -> LinkPayload | None:
        """The payload of a token's JSON object, or None if it is not one this service
        writes."""
        try:
            principal, limit, started = raw.get("p"), raw.get("l"), raw.get("g")
            approval = raw.get("v")
            payload = cls(
                tenant=str(raw["t"]),
                session_id=str(raw["s"]),
                action=LinkAction(raw["a"]),
                category=str(raw["c"]),
                amount=int(raw["n"]),
                link_id=str(raw["i"]),
                expires_ms=int(raw["e"]) * 1000,
                principal=None if principal is None else str(principal),
                limit=None if limit is None else int(limit),
                started_ms=None if started is None else int(started),
                approval_id=None if approval is None else str(approval),
            )
        except (KeyError, ValueError, TypeError):
            return None
        if (payload.approval_id is None) == (payload.action in APPROVAL_ACTIONS):
            return None  # an approval link names its approval; no other link does
        return payload

    def identity(self) -> Identity:
        """Whom the admin side sees acting: the link, audited as `email-link`."""
        name = f"{self.link_id}:{self.action.value}"
        return Identity(tenant=self.tenant, role=LINK_ROLE, token_id=LINK_ACTOR, name=name)

    def describe(self) -> str:
        """What confirming the link does, in one sentence."""
        if self.action is LinkAction.RAISE:
            return (
                f"Raise the '{self.category}' limit of session '{self.session_id}' "
                f"by {self.amount} calls."
            )
        if self.action is LinkAction.SUSPEND:
            return f"Suspend session '{self.session_id}': every tool call in it is refused."
        if self.action is LinkAction.APPROVE:
            return f"Approve {self.approval_id}: the call it is for may then run once."
        if self.action is LinkAction.DENY:
            return f"Deny {self.approval_id}: the call it is for is refused (approval_denied)."
        return (
            f"Suspend principal '{self.principal}': every tool call made for it is refused, "
            "in every session."
        )


def new_link_id() -> str:
    """A link's id: 64 random bits, in hex."""
    return secrets.token_hex(8)


def key_id(secret: bytes) -> str:
    """A key's public id: derived from the key, so none is stored beside it, and
    revealing nothing of it (an HMAC of a fixed label)."""
    return hmac.new(secret, b"mcp-quota link key id", hashlib.sha256).hexdigest()[:KEY_ID_LENGTH]


class LinkSigner:
    """Signs link tokens with the newest key and verifies them with any key held."""

    def __init__(
        self,
        keys: Sequence[bytes],
        reload: Callable[[], Sequence[bytes]] | None = None,
    ) -> None:
        """`keys`, newest first; `reload` reads them again when a token names a key
        this container has not seen (another container read a rotated secret first).

        Raises:
            ValueError: no key, or a key shorter than 16 bytes (a configuration fault).
        """
        self._reload = reload
        self._reloaded_at_ms: int | None = None
        self._keys: dict[str, bytes] = {}
        self._current = ""
        self._hold(keys)

    def _hold(self, keys: Sequence[bytes]) -> None:
        if not keys or any(len(key) < 16 for key in keys):
            raise ValueError("each link key must be at least 16 bytes")
        self._keys = {key_id(key): key for key in reversed(keys)}
        self._current = key_id(keys[0])

    @property
    def current_key_id(self) -> str:
        """The id of the key that signs new links."""
        return self._current

    def sign(self, payload: LinkPayload) -> str:
        """The token for a link: `v2-<key id>.<payload>.<signature>`, URL-safe."""
        label = f"{_VERSION}-{self._current}"
        return signed.seal(label, self._keys[self._current], payload.to_compact())

    def _candidates(self, version: str, now_ms: int) -> list[bytes]:
        """The keys that may have signed a token of this version segment."""
        prefix, _, kid = version.partition("-")
        if prefix != _VERSION or len(kid) != KEY_ID_LENGTH:
            return []
        if kid not in self._keys and self._reload is not None:
            last = self._reloaded_at_ms
            if last is None or now_ms - last >= RELOAD_AFTER_MS:
                self._reloaded_at_ms = now_ms
                self._hold(self._reload())
        key = self._keys.get(kid)
        return [] if key is None else [key]

    def verify(self, token: str, now_ms: int) -> LinkPayload | LinkProblem:
        """The payload of a genuine, unexpired token, or what is wrong with it.

        Raises:
            StorageError: re-reading the keys for an unknown key id failed.
        """
        payload = self.read(token, now_ms)
        if isinstance(payload, LinkPayload) and payload.expires_ms <= now_ms:
            return LinkProblem.EXPIRED
        return payload

    def read(self, token: str, now_ms: int) -> LinkPayload | LinkProblem:
        """The payload of a genuine token, expired or not (for the page that says what
        expired): never to act on.

        Raises:
            StorageError: re-reading the keys for an unknown key id failed.
        """
        if token.partition(".")[0] == _RETIRED and token.count(".") == 2:
            return LinkProblem.RETIRED
        raw = signed.unseal(token, lambda label: self._candidates(label, now_ms), MAX_TOKEN)
        payload = None if raw is None else LinkPayload.from_compact(raw)
        return LinkProblem.TAMPERED if payload is None else payload
