"""The DynamoDB adapters: the only code that knows keys, expressions, TTL attributes and
botocore errors. `open_stores()` opens each port on first use, so a container that only
answers checks never imports the admin side's adapters."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from chalicelib.quota.results import CallResults
    from chalicelib.settings import Settings
    from chalicelib.storage.dynamodb.approvals import ApprovalTable
    from chalicelib.storage.ports import (
        AuditLog,
        BudgetCounters,
        GrantRepository,
        LinkUses,
        SessionCounters,
        TokenRepository,
        TroubleIndex,
    )


class DynamoDBStores:
    """Every port on the stage's tables (`Stores`)."""

    def __init__(
        self,
        settings: Settings,
        categories: tuple[str, ...],
        client: Callable[[], DynamoDBClient],
        token_client: Callable[[], DynamoDBClient],
    ) -> None:
        self._settings = settings
        self._categories = categories
        self._client = client
        self._token_client = token_client

    @cached_property
    def counters(self) -> SessionCounters:
        from chalicelib.storage.dynamodb.counters import CounterStore

        s = self._settings
        return CounterStore(self._client(), s.counters_table, self._categories, s.last_calls)

    @cached_property
    def budgets(self) -> BudgetCounters:
        from chalicelib.storage.dynamodb.budgets import BudgetStore

        return BudgetStore(self._client(), self._settings.counters_table)

    @cached_property
    def tokens(self) -> TokenRepository:
        from chalicelib.storage.dynamodb.tokens import TokenStore

        return TokenStore(self._token_client(), self._settings.tokens_table)

    @cached_property
    def audit_log(self) -> AuditLog:
        from chalicelib.storage.dynamodb.audit import AuditStore

        s = self._settings
        return AuditStore(self._client(), s.audit_table, s.audit_ttl_days)

    @cached_property
    def grants(self) -> GrantRepository:
        from chalicelib.storage.dynamodb.grants import GrantStore

        return GrantStore(self._client(), self._settings.grants_table)

    @cached_property
    def link_uses(self) -> LinkUses:
        from chalicelib.storage.dynamodb.links import LinkUseStore

        return LinkUseStore(self._client(), self._settings.counters_table)

    @cached_property
    def trouble(self) -> TroubleIndex:
        from chalicelib.storage.dynamodb.trouble import TroubleStore

        return TroubleStore(self._client(), self._settings.audit_table)

    @cached_property
    def approvals(self) -> ApprovalTable:
        from chalicelib.storage.dynamodb.approvals import ApprovalTable

        return ApprovalTable(self._client(), self._settings.audit_table)

    @cached_property
    def results(self) -> CallResults:
        from chalicelib.storage.dynamodb.results import ResultStore

        return ResultStore(self._client(), self._settings.counters_table)


def open_stores(
    settings: Settings,
    categories: tuple[str, ...],
    client: Callable[[], DynamoDBClient],
    token_client: Callable[[], DynamoDBClient],
) -> DynamoDBStores:
    """The stage's stores on DynamoDB; no connection is made until a port is used."""
    return DynamoDBStores(settings, categories, client, token_client)
