"""A grant: a raise planned ahead for a principal (e.g. a content migration), in a time
window. The value and its one rule; keeping grants and applying them to limits is
`chalicelib/admin/grants.py`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Grant:
    """A planned raise of one category's limit for one principal, in a time window."""

    grant_id: str
    tenant: str
    principal: str
    category: str
    limit: int
    starts_at_ms: int
    ends_at_ms: int
    reason: str
    created_by: str
    created_at_ms: int

    def applies(self, principal: str | None, category: str, now_ms: int) -> bool:
        """Whether this grant lifts `category` for `principal` at `now_ms`."""
        return (
            principal == self.principal
            and category == self.category
            and self.starts_at_ms <= now_ms < self.ends_at_ms
        )
