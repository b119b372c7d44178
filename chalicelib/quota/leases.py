"""Leases: calls granted in one check for a client to spend locally, and the id a client
sends back with the calls it did not spend (checked against the grant the session kept)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

LEASE_ID = re.compile(
    r"^(?P<category>[a-z][a-z0-9_]{0,31})\.(?P<check>[A-Za-z0-9_-]{1,12})\.(?P<units>[1-9][0-9]{0,2})"
    r"\.(?P<granted>[0-9a-z]{1,12})\.(?P<started>[0-9a-z]{1,12})"
    r"(?:\.(?P<principal>[A-Za-z0-9_-]{1,1400}))?(?:~(?P<shard>[1-9][0-9]?))?$"
)


@dataclass(frozen=True)
class Lease:
    """Calls granted in one check, this call included, for the client to spend locally.

    The id names the grant: category, check id, calls granted, when, the session
    counters' generation and the principal charged, so that a return can be capped,
    applied once without a read, and credited to the principal that was charged.
    """

    category: str
    check_id: str
    granted: int
    granted_ms: int
    started_ms: int
    expires_at_ms: int
    lease_max: int
    lease_seconds: int
    principal: str | None = None  # the principal the wider budgets charged
    shard: int = 0  # the tenant shard that counted it: a return goes back there

    @property
    def lease_id(self) -> str:
        """The id a client sends back with the calls it did not spend."""
        parts = [
            self.category,
            self.check_id,
            str(self.granted),
            base36(self.granted_ms),
            base36(self.started_ms),
        ]
        if self.principal is not None:
            parts.append(base64.urlsafe_b64encode(self.principal.encode()).decode().rstrip("="))
        # Not part of the grant: a shard altered by the client moves calls between the
        # tenant's own shards, whose counts add up the same (never past the limit).
        return ".".join(parts) + (f"~{self.shard}" if self.shard else "")


@dataclass(frozen=True)
class LeaseId:
    """A lease id as a client sends it back: what the grant was, unverified."""

    category: str
    check_id: str
    granted: int
    granted_ms: int
    started_ms: int
    principal: str | None = None  # whom the lease was charged to, as the id names it
    shard: int = 0  # the tenant shard that counted it, as the id names it (unbound)

    @property
    def grant(self) -> str:
        """The grant this id claims, in the form the session keeps its last lease in: a
        return is applied only if the two are equal, so a forged or altered id (another
        size, time, check or principal) gives nothing back."""
        return grant_of(self.check_id, self.granted_ms, self.granted, self.principal)

    @classmethod
    def parse(cls, text: str) -> LeaseId | None:
        """The lease id's parts, or None if it is not one this service issues."""
        match = LEASE_ID.fullmatch(text)
        if match is None:
            return None
        principal = None
        if match["principal"] is not None:
            principal = _principal(match["principal"])
            if principal is None:
                return None
        return cls(
            match["category"],
            match["check"],
            int(match["units"]),
            int(match["granted"], 36),
            int(match["started"], 36),
            principal,
            int(match["shard"] or 0),
        )


def grant_of(check_id: str, granted_ms: int, units: int, principal: str | None = None) -> str:
    """A lease as the session keeps it: which check granted it, when, how many calls, and
    (a digest of) the principal it was charged to."""
    grant = f"{check_id}|{granted_ms}|{units}"
    if principal is None:
        return grant
    return f"{grant}|{hashlib.sha256(principal.encode()).hexdigest()[:16]}"


def _principal(encoded: str) -> str | None:
    """The principal a lease id names, or None if the part is not one this service writes."""
    try:
        text = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text or None


def base36(value: int) -> str:
    """A non-negative integer in base 36, lower case: the compact form of the times in a
    lease id and in a stored call (`int(text, 36)` reads it back)."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, digit = divmod(value, 36)
        out = digits[digit] + out
        if value == 0:
            return out
