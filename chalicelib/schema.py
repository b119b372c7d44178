"""Table definitions, written once: the local backend, the tests and the deploy template
all create tables from these, so they cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IndexSpec:
    """A global secondary index with string keys, projecting every attribute (a page of
    the index is a page of answers: no read of the table behind it)."""

    name: str
    partition_key: str
    sort_key: str


@dataclass(frozen=True)
class TableSpec:
    """Key schema, secondary indexes and TTL attribute of one DynamoDB table."""

    logical_name: str
    partition_key: str
    sort_key: str | None = None
    ttl_attribute: str | None = None
    indexes: tuple[IndexSpec, ...] = ()

    def create_table_kwargs(self, table_name: str) -> dict[str, object]:
        """Arguments for `CreateTable` (on-demand billing)."""
        keys = [{"AttributeName": self.partition_key, "KeyType": "HASH"}]
        names = [self.partition_key]
        if self.sort_key is not None:
            keys.append({"AttributeName": self.sort_key, "KeyType": "RANGE"})
            names.append(self.sort_key)
        for index in self.indexes:
            names += [index.partition_key, index.sort_key]
        attrs = [{"AttributeName": name, "AttributeType": "S"} for name in dict.fromkeys(names)]
        kwargs: dict[str, object] = {
            "TableName": table_name,
            "KeySchema": keys,
            "AttributeDefinitions": attrs,
            "BillingMode": "PAY_PER_REQUEST",
        }
        if self.indexes:
            kwargs["GlobalSecondaryIndexes"] = [
                {
                    "IndexName": index.name,
                    "KeySchema": [
                        {"AttributeName": index.partition_key, "KeyType": "HASH"},
                        {"AttributeName": index.sort_key, "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
                for index in self.indexes
            ]
        return kwargs


# The audit table's indexes. Every event item carries `sk` (epoch ms, then its id) and is
# in the tenant index; the facet indexes are sparse (an event without a principal, say,
# is in no principal index).
AUDIT_BY_TENANT = IndexSpec("by_tenant", partition_key="tenant", sort_key="sk")
AUDIT_BY_PRINCIPAL = IndexSpec("by_principal", partition_key="principal_feed", sort_key="sk")
AUDIT_BY_SERVER = IndexSpec("by_server", partition_key="server_feed", sort_key="sk")
AUDIT_BY_TYPE = IndexSpec("by_type", partition_key="type_feed", sort_key="sk")

COUNTERS = TableSpec("CountersTable", partition_key="pk", ttl_attribute="expires_at")
TOKENS = TableSpec("TokensTable", partition_key="token_id")
AUDIT = TableSpec(
    "AuditTable",
    partition_key="pk",
    sort_key="sk",
    ttl_attribute="expires_at",
    indexes=(AUDIT_BY_TENANT, AUDIT_BY_PRINCIPAL, AUDIT_BY_SERVER, AUDIT_BY_TYPE),
)
GRANTS = TableSpec(
    "GrantsTable", partition_key="tenant", sort_key="grant_id", ttl_attribute="expires_at"
)

ALL_TABLES: dict[str, TableSpec] = {
    "counters": COUNTERS,
    "tokens": TOKENS,
    "audit": AUDIT,
    "grants": GRANTS,
}
