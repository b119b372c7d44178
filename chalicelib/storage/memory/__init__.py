"""In-memory adapters for every port: thread-safe, with the DynamoDB adapters' semantics
(conditional failures, idle expiry, idempotent retries, batch-trimmed last calls).

For quick experiments (`QUOTA_BACKEND=memory`) and for the decision-logic tests. State
lives in one process: a deployment with more than one Lambda container needs DynamoDB.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chalicelib.quota.results import CallResults
    from chalicelib.settings import Settings
    from chalicelib.storage.memory.approvals import MemoryApprovals
    from chalicelib.storage.ports import (
        AuditLog,
        BudgetCounters,
        GrantRepository,
        LinkUses,
        SessionCounters,
        TokenRepository,
        TroubleIndex,
    )


class MemoryStores:
    """Every port in this process's memory (`Stores`)."""

    def __init__(self, settings: Settings, categories: tuple[str, ...]) -> None:
        self._settings = settings
        self._categories = categories

    @cached_property
    def counters(self) -> SessionCounters:
        from chalicelib.storage.memory.records import MemoryCounters

        return MemoryCounters(self._categories, self._settings.last_calls)

    @cached_property
    def budgets(self) -> BudgetCounters:
        from chalicelib.storage.memory.records import MemoryBudgets

        return MemoryBudgets()

    @cached_property
    def tokens(self) -> TokenRepository:
        from chalicelib.storage.memory.tokens import MemoryTokens

        return MemoryTokens()

    @cached_property
    def audit_log(self) -> AuditLog:
        from chalicelib.storage.memory.audit import MemoryAuditLog

        return MemoryAuditLog()

    @cached_property
    def grants(self) -> GrantRepository:
        from chalicelib.storage.memory.grants import MemoryGrants

        return MemoryGrants()

    @cached_property
    def link_uses(self) -> LinkUses:
        from chalicelib.storage.memory.links import MemoryLinkUses

        return MemoryLinkUses()

    @cached_property
    def trouble(self) -> TroubleIndex:
        from chalicelib.storage.memory.trouble import MemoryTroubleIndex

        return MemoryTroubleIndex()

    @cached_property
    def approvals(self) -> MemoryApprovals:
        from chalicelib.storage.memory.approvals import MemoryApprovals

        return MemoryApprovals()

    @cached_property
    def results(self) -> CallResults:
        from chalicelib.storage.memory.results import MemoryResults

        return MemoryResults()


def open_stores(
    settings: Settings,
    categories: tuple[str, ...],
    client: Callable[[], Any],
    token_client: Callable[[], Any],
) -> MemoryStores:
    """Fresh stores in this process's memory; the clients are not used."""
    del client, token_client
    return MemoryStores(settings, categories)
