"""Leases: calls granted in one check for a client to spend locally, and the id a client
sends back with the calls it did not spend (checked against the grant the session kept)."""

from __future__ import annotations

import re
from dataclasses import dataclass

LEASE_ID = re.compile(
    r"^(?P<category>[a-z][a-z0-9_]{0,31})\.(?P<check>[A-Za-z0-9_-]{1,12})\.(?P<units>[1-9][0-9]{0,2})"
    r"\.(?P<granted>[0-9a-z]{1,12})\.(?P<started>[0-9a-z]{1,12})$"
)


@dataclass(frozen=True)
class Lease:
    """Calls granted in one check, this call included, for the client to spend locally.

    The id names the grant: category, check id, calls granted, when, and the session
    counters' generation, so that a return can be capped and applied once without a read.
    """

    category: str
    check_id: str
    granted: int
    granted_ms: int
    started_ms: int
    expires_at_ms: int
    lease_max: int
    lease_seconds: int

    @property
    def lease_id(self) -> str:
        """The id a client sends back with the calls it did not spend."""
        return ".".join(
            (
                self.category,
                self.check_id,
                str(self.granted),
                _base36(self.granted_ms),
                _base36(self.started_ms),
            )
        )


@dataclass(frozen=True)
class LeaseId:
    """A lease id as a client sends it back: what the grant was, unverified."""

    category: str
    check_id: str
    granted: int
    granted_ms: int
    started_ms: int

    @property
    def grant(self) -> str:
        """The grant this id claims, in the form the session keeps its last lease in: a
        return is applied only if the two are equal, so a forged or altered id (another
        size, time or check) gives nothing back."""
        return grant_of(self.check_id, self.granted_ms, self.granted)

    @classmethod
    def parse(cls, text: str) -> LeaseId | None:
        """The lease id's parts, or None if it is not one this service issues."""
        match = LEASE_ID.fullmatch(text)
        if match is None:
            return None
        return cls(
            match["category"],
            match["check"],
            int(match["units"]),
            int(match["granted"], 36),
            int(match["started"], 36),
        )


def grant_of(check_id: str, granted_ms: int, units: int) -> str:
    """A lease as the session keeps it: which check granted it, when, how many calls."""
    return f"{check_id}|{granted_ms}|{units}"


def _base36(value: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        value, digit = divmod(value, 36)
        out = digits[digit] + out
        if value == 0:
            return out
