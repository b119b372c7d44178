"""The audit log port on DynamoDB: partition per tenant + session, time-ordered sort
key, long TTL."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.admin.audit import AuditEvent, EventType
from chalicelib.storage import page_tokens
from chalicelib.storage.faults import translate
from chalicelib.storage.ports import AuditPage

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_NEW_EVENT = "attribute_not_exists(#pk)"
_SINCE = "#pk = :pk AND #sk >= :since"
_JSON_FIELDS = ("before", "after", "detail")


def _key(tenant: str, session_id: str) -> str:
    return f"{tenant}#{session_id}"


def _item(event: AuditEvent, ttl_seconds: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": _key(event.tenant, event.session_id)},
        "sk": {"S": event.sort_key},
        "at": {"N": str(event.at_ms)},
        "type": {"S": event.type},
        "tenant": {"S": event.tenant},
        "session_id": {"S": event.session_id},
        "actor": {"S": event.actor},
        "expires_at": {"N": str(event.at_ms // 1000 + ttl_seconds)},
    }
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
        **extra,
    )


class AuditStore:
    """Append and page through audit events."""

    def __init__(self, client: DynamoDBClient, table_name: str, ttl_days: int = 90) -> None:
        self._client = client
        self._table = table_name
        self._ttl_seconds = ttl_days * 86_400

    def put(self, event: AuditEvent) -> None:
        """Append one event (never overwrites).

        Raises:
            StorageError: the store failed.
        """
        try:
            self._client.put_item(
                TableName=self._table,
                Item=_item(event, self._ttl_seconds),
                ConditionExpression=_NEW_EVENT,
                ExpressionAttributeNames={"#pk": "pk"},
            )
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "writing the audit trail") from exc

    def page(
        self,
        tenant: str,
        session_id: str,
        since_ms: int = 0,
        limit: int = 50,
        next_token: str | None = None,
    ) -> AuditPage:
        """Events of one session (or the tenant scope) from `since_ms`, oldest first.

        Raises:
            BadPageToken: the page token is not one this listing issued.
            StorageError: the store failed.
        """
        pk = _key(tenant, session_id)
        since = f"{since_ms:013d}"
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": _SINCE,
            "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
            "ExpressionAttributeValues": {":pk": {"S": pk}, ":since": {"S": since}},
            # One more than asked, so that the last page says there is no next one.
            "Limit": limit + 1,
        }
        after = None if next_token is None else page_tokens.decode(next_token, tenant, session_id)
        # A start key before `since` is outside the key condition, which DynamoDB refuses
        # (ValidationException): the page then starts at `since`, as it would anyway.
        if after is not None and after >= since:
            kwargs["ExclusiveStartKey"] = {"pk": {"S": pk}, "sk": {"S": after}}
        try:
            response = self._client.query(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "reading the audit trail") from exc
        items = response.get("Items", [])
        kept = items[:limit]
        more = len(items) > limit or "LastEvaluatedKey" in response
        token = None
        if more and kept:
            token = page_tokens.encode(tenant, session_id, kept[-1]["sk"]["S"])
        return AuditPage(events=[_event(item) for item in kept], next_token=token)
