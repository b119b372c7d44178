"""The audit log port on DynamoDB: partition per tenant + session, time-ordered sort
key, long TTL."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.audit import AuditEvent, EventType
from chalicelib.ports import AuditPage, BadPageToken
from chalicelib.storage.faults import translate

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_NEW_EVENT = "attribute_not_exists(#pk)"
_SINCE = "#pk = :pk AND #sk >= :since"
_JSON_FIELDS = ("before", "after", "detail")
_SORT_KEY = re.compile(r"[0-9]{13}#[0-9a-f]{12}")


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


def _encode_token(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


def _decode_token(token: str, pk: str) -> dict[str, Any]:
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError) as exc:
        raise BadPageToken("reading the audit trail") from exc
    if not isinstance(key, dict) or key.get("pk") != {"S": pk}:
        raise BadPageToken("reading the audit trail")
    sort_key = key.get("sk")
    valid = (
        set(key) == {"pk", "sk"}
        and isinstance(sort_key, dict)
        and isinstance(sort_key.get("S"), str)
        and _SORT_KEY.fullmatch(sort_key["S"])
    )
    if not valid:
        raise BadPageToken("reading the audit trail")
    return key


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
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": _SINCE,
            "ExpressionAttributeNames": {"#pk": "pk", "#sk": "sk"},
            "ExpressionAttributeValues": {":pk": {"S": pk}, ":since": {"S": f"{since_ms:013d}"}},
            # One more than asked, so that the last page says there is no next one.
            "Limit": limit + 1,
        }
        if next_token is not None:
            kwargs["ExclusiveStartKey"] = _decode_token(next_token, pk)
        try:
            response = self._client.query(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "reading the audit trail") from exc
        items = response.get("Items", [])
        kept = items[:limit]
        more = len(items) > limit or "LastEvaluatedKey" in response
        last = {"pk": kept[-1]["pk"], "sk": kept[-1]["sk"]} if more and kept else None
        return AuditPage(
            events=[_event(item) for item in kept],
            next_token=_encode_token(last) if last else None,
        )
