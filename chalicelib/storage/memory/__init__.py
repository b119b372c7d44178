"""In-memory adapters for every port: thread-safe, with the DynamoDB adapters' semantics
(conditional failures, idle expiry, idempotent retries, batch-trimmed last calls).

For quick experiments (`QUOTA_BACKEND=memory`) and for the decision-logic tests. State
lives in one process: a deployment with more than one Lambda container needs DynamoDB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chalicelib.settings import Settings


class MemoryStores:
    """Every port in this process's memory (`Stores`)."""

    def __init__(self, settings: Settings, categories: tuple[str, ...]) -> None:
        from chalicelib.storage.memory import tables
        from chalicelib.storage.memory.approvals import MemoryApprovals
        from chalicelib.storage.memory.audit import MemoryAuditLog
        from chalicelib.storage.memory.records import MemoryBudgets, MemoryCounters

        self.counters = MemoryCounters(categories, settings.last_calls)
        self.budgets = MemoryBudgets()
        self.tokens = tables.MemoryTokens()
        self.audit_log = MemoryAuditLog()
        self.grants = tables.MemoryGrants()
        self.link_uses = tables.MemoryLinkUses()
        self.trouble = tables.MemoryTroubleIndex()
        self.approvals = MemoryApprovals()
        self.results = tables.MemoryResults()


def open_stores(settings: Settings, categories: tuple[str, ...], *_clients: object) -> MemoryStores:
    """Fresh stores in this process's memory; the clients are not used."""
    return MemoryStores(settings, categories)
