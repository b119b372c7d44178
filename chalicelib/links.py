"""Signed one-click actions for the exhaustion email: a compact payload (tenant, session,
action, category, amount, link id, expiry) signed with HMAC-SHA256 under a per-deployment
secret. Verifying a link is pure: a clock is passed in; the single use lives in a store."""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Any

from chalicelib.audit import LINK_ROLE
from chalicelib.tokens import Identity

LINK_TTL_MS = 24 * 3600 * 1000
LINK_ACTOR = "email-link"  # the audit actor of every action taken through a link
_VERSION = "v1"
MAX_TOKEN = 2048


class LinkAction(enum.StrEnum):
    """What a link does when confirmed."""

    RAISE = "raise"  # raise the session's category by `amount`
    SUSPEND = "suspend"  # suspend the session
    SUSPEND_PRINCIPAL = "suspend_principal"  # suspend whom the session's agent acts for


class LinkProblem(enum.StrEnum):
    """Why a link cannot be used: its answer is 403 (tampered) or 410 (expired)."""

    TAMPERED = "tampered"
    EXPIRED = "expired"


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
        return out

    @classmethod
    def from_compact(cls, raw: Any) -> LinkPayload | None:
        """The payload, or None if it is not one this service writes."""
        if not isinstance(raw, dict):
            return None
        try:
            principal = raw.get("p")
            payload = cls(
                tenant=str(raw["t"]),
                session_id=str(raw["s"]),
                action=LinkAction(raw["a"]),
                category=str(raw["c"]),
                amount=int(raw["n"]),
                link_id=str(raw["i"]),
                expires_ms=int(raw["e"]) * 1000,
                principal=None if principal is None else str(principal),
            )
        except (KeyError, ValueError, TypeError):
            return None
        return payload

    def identity(self) -> Identity:
        """Whom the admin side sees acting: the link, audited as `email-link`."""
        return Identity(tenant=self.tenant, role=LINK_ROLE, token_id=LINK_ACTOR, name=self.link_id)

    def describe(self) -> str:
        """What confirming the link does, in one sentence."""
        if self.action is LinkAction.RAISE:
            return (
                f"Raise the '{self.category}' limit of session '{self.session_id}' "
                f"by {self.amount} calls."
            )
        if self.action is LinkAction.SUSPEND:
            return f"Suspend session '{self.session_id}': every tool call in it is refused."
        return (
            f"Suspend principal '{self.principal}': every tool call made for it is refused, "
            "in every session."
        )


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_link_id() -> str:
    """A link's id: 64 random bits, in hex."""
    return secrets.token_hex(8)


class LinkSigner:
    """Signs and verifies link tokens with one deployment's secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the link secret must be at least 16 bytes")
        self._secret = secret

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._secret, body.encode("ascii"), hashlib.sha256).digest())

    def sign(self, payload: LinkPayload) -> str:
        """The token for a link: `v1.<payload>.<signature>`, URL-safe."""
        compact = json.dumps(payload.to_compact(), separators=(",", ":"), sort_keys=True)
        body = f"{_VERSION}.{_b64(compact.encode('utf-8'))}"
        return f"{body}.{self._mac(body)}"

    def verify(self, token: str, now_ms: int) -> LinkPayload | LinkProblem:
        """The payload of a genuine, unexpired token, or what is wrong with it."""
        if len(token) > MAX_TOKEN or not token.isascii() or token.count(".") != 2:
            return LinkProblem.TAMPERED
        version, encoded, mac = token.split(".")
        body = f"{version}.{encoded}"
        if version != _VERSION or not hmac.compare_digest(self._mac(body), mac):
            return LinkProblem.TAMPERED
        try:
            payload = LinkPayload.from_compact(json.loads(_unb64(encoded)))
        except (binascii.Error, ValueError):
            return LinkProblem.TAMPERED
        if payload is None:
            return LinkProblem.TAMPERED
        if payload.expires_ms <= now_ms:
            return LinkProblem.EXPIRED
        return payload
