"""Create the service's tables (and turn on TTL) where they are missing: for the local
backend, a DynamoDB-compatible server, or the tests. Production uses the deploy template."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from chalicelib.schema import ALL_TABLES
from chalicelib.settings import Settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def table_names(settings: Settings) -> dict[str, str]:
    """Logical table key -> physical table name, from the settings."""
    return {
        "counters": settings.counters_table,
        "tokens": settings.tokens_table,
        "audit": settings.audit_table,
        "grants": settings.grants_table,
    }


def create_tables(client: DynamoDBClient, settings: Settings, poll_seconds: float = 1) -> list[str]:
    """Create each missing table and enable TTL where supported; returns those created.
    `poll_seconds`: how often to look whether a new table is active (a local server
    makes it active at once: the tests look every 20 ms)."""
    created: list[str] = []
    existing = set(client.list_tables().get("TableNames", []))
    for key, name in table_names(settings).items():
        spec = ALL_TABLES[key]
        if name not in existing:
            kwargs: dict[str, Any] = spec.create_table_kwargs(name)
            client.create_table(**kwargs)
            client.get_waiter("table_exists").wait(
                TableName=name,
                WaiterConfig={"Delay": poll_seconds, "MaxAttempts": 30},  # type: ignore[typeddict-item]  # botocore sleeps any number
            )
            created.append(name)
        if spec.ttl_attribute is not None:
            # dynalite has no TTL and AWS refuses to enable it twice; TTL is clean-up only.
            with contextlib.suppress(ClientError):
                client.update_time_to_live(
                    TableName=name,
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
                )
    return created
