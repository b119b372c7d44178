"""Table definitions, written once: the local backend, the tests and the deploy template
all create tables from these, so they cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TableSpec:
    """Key schema and TTL attribute of one DynamoDB table."""

    logical_name: str
    partition_key: str
    sort_key: str | None = None
    ttl_attribute: str | None = None

    def create_table_kwargs(self, table_name: str) -> dict[str, object]:
        """Arguments for `CreateTable` (on-demand billing)."""
        keys = [{"AttributeName": self.partition_key, "KeyType": "HASH"}]
        attrs = [{"AttributeName": self.partition_key, "AttributeType": "S"}]
        if self.sort_key is not None:
            keys.append({"AttributeName": self.sort_key, "KeyType": "RANGE"})
            attrs.append({"AttributeName": self.sort_key, "AttributeType": "S"})
        return {
            "TableName": table_name,
            "KeySchema": keys,
            "AttributeDefinitions": attrs,
            "BillingMode": "PAY_PER_REQUEST",
        }


COUNTERS = TableSpec("CountersTable", partition_key="pk", ttl_attribute="expires_at")
TOKENS = TableSpec("TokensTable", partition_key="token_id")
AUDIT = TableSpec("AuditTable", partition_key="pk", sort_key="sk", ttl_attribute="expires_at")
GRANTS = TableSpec(
    "GrantsTable", partition_key="tenant", sort_key="grant_id", ttl_attribute="expires_at"
)

ALL_TABLES: dict[str, TableSpec] = {
    "counters": COUNTERS,
    "tokens": TOKENS,
    "audit": AUDIT,
    "grants": GRANTS,
}
