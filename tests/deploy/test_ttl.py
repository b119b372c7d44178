"""The TTL attribute the template enables on a table is the one its adapter writes, so
TTL actually cleans up (a misspelt attribute would keep every item for ever)."""

from __future__ import annotations

import boto3
import pytest

from chalicelib.quota.grants import Grant
from chalicelib.schema import GRANTS
from chalicelib.storage.dynamodb.grants import GrantStore

DAY_MS = 24 * 3600 * 1000
ENDS_AT_MS = 1_800_000_000_000


@pytest.mark.usefixtures("moto_aws")
def test_a_stored_grant_expires_some_days_after_its_window_closes() -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(**GRANTS.create_table_kwargs("grants"))  # type: ignore[arg-type]
    grant = Grant(
        grant_id="g1",
        tenant="acme",
        principal="migration-bot",
        category="write",
        limit=500,
        starts_at_ms=ENDS_AT_MS - DAY_MS,
        ends_at_ms=ENDS_AT_MS,
        reason="content migration",
        created_by="ops",
        created_at_ms=ENDS_AT_MS - 2 * DAY_MS,
    )
    GrantStore(client, "grants").put(grant)

    (item,) = client.scan(TableName="grants")["Items"]
    assert GRANTS.ttl_attribute is not None
    expires_at_s = int(item[GRANTS.ttl_attribute]["N"])  # epoch seconds, as TTL reads it
    days_after_end = (expires_at_s * 1000 - ENDS_AT_MS) / DAY_MS
    assert 1 <= days_after_end <= 90
