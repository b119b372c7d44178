"""The audit log port on DynamoDB, long TTL.

Item: pk "<tenant>#<session id>" (the session index: a session's events, strongly
consistent), sk "<13-digit epoch ms>#<event id>", at, type, tenant, session_id, actor,
principal, server, reason/before/after/detail (JSON), expires_at (TTL).

The tenant-wide listing reads one global secondary index, newest first: `by_tenant` on
(tenant, sk) holds every event; `by_principal`, `by_server` and `by_type` hold the events
that name one, keyed "<tenant> <value>". A page is one Query of one index partition,
bounded by the page size, whatever the tenant's history. Filters beyond the one the index
answers are a filter expression on that Query.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from chalicelib.quota.events import AuditEvent, EventType
from chalicelib.schema import (
    AUDIT_BY_PRINCIPAL,
    AUDIT_BY_SERVER,
    AUDIT_BY_TENANT,
    AUDIT_BY_TYPE,
    IndexSpec,
)
from chalicelib.storage import page_tokens
from chalicelib.storage.audit_port import AuditLog
from chalicelib.storage.dynamodb.updates import Table, call
from chalicelib.storage.ports import AuditFilter, AuditPage
from chalicelib.storage.records import event_key

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_AFTER = "#pk = :pk AND #sk > :after"
_FEED_RANGE = "#feed = :feed AND #sk BETWEEN :lo AND :hi"
_JSON_FIELDS = ("before", "after", "detail")
_LAST_OF_MS = "#~"  # sorts after every "#<event id>" of the same millisecond
_FILTERS = {
    "type": "#type = :type",
    "principal": "#principal = :principal",
    "server": "#server = :server",
}


def _key(tenant: str, session_id: str) -> str:
    return f"{tenant}#{session_id}"


def _feed(tenant: str, value: str) -> str:
    # Tenant names hold no space: the first space ends the tenant.
    return f"{tenant} {value}"


def _item(event: AuditEvent, ttl_seconds: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": _key(event.tenant, event.session_id)},
        "sk": {"S": event_key(event)},
        "at": {"N": str(event.at_ms)},
        "type": {"S": event.type},
        "type_feed": {"S": _feed(event.tenant, event.type)},
        "tenant": {"S": event.tenant},
        "session_id": {"S": event.session_id},
        "actor": {"S": event.actor},
        "expires_at": {"N": str(event.at_ms // 1000 + ttl_seconds)},
    }
    if event.principal is not None:
        item["principal"] = {"S": event.principal}
        item["principal_feed"] = {"S": _feed(event.tenant, event.principal)}
    if event.server is not None:
        item["server"] = {"S": event.server}
        item["server_feed"] = {"S": _feed(event.tenant, event.server)}
    if event.reason is not None:
        item["reason"] = {"S": event.reason}
    for name in _JSON_FIELDS:
        value = getattr(event, name)
        if value is not None:
            item[name] = {"S": json.dumps(value, sort_keys=True)}
    return item


def _event(item: dict[str, Any]) -> AuditEvent:
    extra = {name: json.loads(item[name]["S"]) for name in _JSON_FIELDS if name in item}
    return AuditEvent(
        at_ms=int(item["at"]["N"]),
        type=EventType(item["type"]["S"]),
        tenant=item["tenant"]["S"],
        session_id=item["session_id"]["S"],
        actor=item["actor"]["S"],
        reason=item.get("reason", {}).get("S"),
        event_id=item["sk"]["S"].split("#", 1)[1],
        principal=item.get("principal", {}).get("S"),
        server=item.get("server", {}).get("S"),
        **extra,
    )


def _feed_query(tenant: str, where: AuditFilter) -> tuple[IndexSpec, str, dict[str, str]]:
    """The index to read, its partition, and the filters it does not answer itself:
    the narrowest facet named wins."""
    filters = {"type": where.type, "principal": where.principal, "server": where.server}
    named = {name: str(value) for name, value in filters.items() if value is not None}
    for name, index in (
        ("principal", AUDIT_BY_PRINCIPAL),
        ("server", AUDIT_BY_SERVER),
        ("type", AUDIT_BY_TYPE),
    ):
        if name in named:
            value = named.pop(name)
            return index, _feed(tenant, value), named
    return AUDIT_BY_TENANT, tenant, named


class AuditStore(Table, AuditLog):
    """Append and page through audit events."""

    def __init__(self, client: DynamoDBClient, table_name: str, ttl_days: int = 90) -> None:
        super().__init__(client, table_name)
        self._ttl_seconds = ttl_days * 86_400

    def put(self, event: AuditEvent) -> None:
        """Append one event (never overwrites).

        Raises:
            StorageError: the store failed.
        """
        item = _item(event, self._ttl_seconds)
        call(lambda: self._client.put_item(**self._as_new(item, "pk")), "writing the audit trail")

    def _after(
        self, tenant: str, session_id: str, after: str, count: int
    ) -> tuple[list[AuditEvent], bool]:
        """`AuditLog._after`: one Query of the session's partition.

        Raises:
            StorageError: the store failed.
        """
        pk, key = {"S": _key(tenant, session_id)}, {"S": after}
        response = call(
            lambda: self._client.query(
                TableName=self._table,
                KeyConditionExpression=_AFTER,
                ExpressionAttributeNames={"#pk": "pk", "#sk": "sk"},
                ExpressionAttributeValues={":pk": pk, ":after": key},
                Limit=count,
            ),
            "reading the audit trail",
        )
        items = response.get("Items", [])
        return [_event(dict(item)) for item in items], "LastEvaluatedKey" in response

    def feed(
        self, tenant: str, where: AuditFilter, limit: int = 50, next_token: str | None = None
    ) -> AuditPage:
        """The tenant's events that `where` holds, newest first: one Query of one index.

        Raises:
            BadPageToken: the page token is not one this listing issued.
            StorageError: the store failed.
        """
        scope = where.scope()
        # The page ends below the last event of the previous page. The key condition
        # bounds it (an inclusive BETWEEN, so that event is read again and dropped)
        # instead of a start key, which on an index would have to name the table's key.
        before = None if next_token is None else page_tokens.decode(next_token, tenant, scope)
        until = "~" if where.until_ms is None else f"{where.until_ms:013d}{_LAST_OF_MS}"
        high = until if before is None else min(before, until)
        index, partition, rest = _feed_query(tenant, where)
        names = {"#feed": index.partition_key, "#sk": index.sort_key}
        values: dict[str, Any] = {
            ":feed": {"S": partition},
            ":lo": {"S": f"{where.since_ms:013d}"},
            ":hi": {"S": high},
        }
        for name, value in rest.items():
            names[f"#{name}"] = name
            values[f":{name}"] = {"S": value}
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": _FEED_RANGE,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
            # The previous page's last event (read again), the page, and one to tell
            # whether another page follows.
            "Limit": limit + 2,
        }
        if rest:
            kwargs["FilterExpression"] = " AND ".join(_FILTERS[name] for name in rest)
        response = call(
            lambda: self._client.query(IndexName=index.name, **kwargs), "reading the audit trail"
        )
        items = [i for i in response.get("Items", []) if i["sk"]["S"] != before]
        kept = items[:limit]
        token = None
        if len(items) > limit:
            token = page_tokens.encode(tenant, scope, kept[-1]["sk"]["S"])
        elif "LastEvaluatedKey" in response:
            # Filtered out or past the read: go on below the last event read.
            token = page_tokens.encode(tenant, scope, response["LastEvaluatedKey"]["sk"]["S"])
        return AuditPage(events=[_event(dict(item)) for item in kept], next_token=token)
