"""In-memory adapters for every port: thread-safe, with the DynamoDB adapters' semantics
(conditional failures, idle expiry, idempotent retries, batch-trimmed last calls).

For quick experiments (`QUOTA_BACKEND=memory`) and for the decision-logic tests. State
lives in one process: a deployment with more than one Lambda container needs DynamoDB.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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


def open_stores(
    settings: Settings,
    categories: tuple[str, ...],
    client: Callable[[], Any],
    token_client: Callable[[], Any],
) -> MemoryStores:
    """Fresh stores in this process's memory; the clients are not used."""
    del client, token_client
    return MemoryStores(settings, categories)
