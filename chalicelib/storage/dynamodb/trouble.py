"""The tenant's index of sessions in trouble (blocked or suspended), on the audit table:
one item per session in a partition of its own per tenant, overwritten by the latest
event. Written when a session's budget runs out (its last unit taken or its first
refusal), a principal is escalated or a session is suspended.

Item: pk "<tenant># trouble" (a space, which no session id holds), sk the session id,
kind, at, category, principal, trouble_at "<13-digit ms>#<session id>", expires_at (TTL,
clean-up only: listings bound `at` themselves). The index `trouble_by_time` on
(pk, trouble_at) lists the entries newest first: a page is one Query of that partition,
bounded by the page size, however many entries the tenant has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.schema import TROUBLE_BY_TIME
from chalicelib.storage import page_tokens
from chalicelib.storage.dynamodb.updates import n, s
from chalicelib.storage.faults import translate
from chalicelib.storage.ports import TroubleKind, TroubleMark, TroublePage

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_NEWEST = "#pk = :pk AND #at BETWEEN :lo AND :hi"
KEEP_DAYS = 30
PAGE_SCOPE = "trouble"


def _pk(tenant: str) -> str:
    return f"{tenant}# trouble"


def _at_key(at_ms: int, session_id: str) -> str:
    return f"{at_ms:013d}#{session_id}"


def _mark(tenant: str, item: dict[str, Any]) -> TroubleMark:
    return TroubleMark(
        tenant=tenant,
        session_id=item["sk"]["S"],
        kind=TroubleKind(item["kind"]["S"]),
        at_ms=int(item["at"]["N"]),
        category=item.get("category", {}).get("S"),
        principal=item.get("principal", {}).get("S"),
    )


class TroubleStore:
    """Marks and lists the sessions in trouble."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self._client = client
        self._table = table_name

    def mark(self, mark: TroubleMark) -> None:
        """Record a session's latest trouble (overwrites its earlier entry).

        Raises:
            StorageError: the store failed.
        """
        item: dict[str, Any] = {
            "pk": s(_pk(mark.tenant)),
            "sk": s(mark.session_id),
            "kind": s(mark.kind.value),
            "at": n(mark.at_ms),
            TROUBLE_BY_TIME.sort_key: s(_at_key(mark.at_ms, mark.session_id)),
            "expires_at": n(mark.at_ms // 1000 + KEEP_DAYS * 86_400),
        }
        if mark.category is not None:
            item["category"] = s(mark.category)
        if mark.principal is not None:
            item["principal"] = s(mark.principal)
        try:
            self._client.put_item(TableName=self._table, Item=item)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "indexing a blocked session") from exc

    def page(
        self, tenant: str, since_ms: int, limit: int, next_token: str | None = None
    ) -> TroublePage:
        """Up to `limit` entries from `since_ms`, newest first: one Query.

        Raises:
            BadPageToken: the page token is not one this listing issued.
            StorageError: the store failed.
        """
        before = None
        if next_token is not None:
            before = page_tokens.decode_key(next_token, tenant, PAGE_SCOPE)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": _NEWEST,
            "ExpressionAttributeNames": {"#pk": "pk", "#at": TROUBLE_BY_TIME.sort_key},
            "ExpressionAttributeValues": {
                ":pk": s(_pk(tenant)),
                ":lo": s(f"{since_ms:013d}"),
                # Inclusive: the previous page's last entry is read again and dropped.
                ":hi": s("~" if before is None else before),
            },
            "ScanIndexForward": False,
            "Limit": limit + 2,
        }
        try:
            response = self._client.query(IndexName=TROUBLE_BY_TIME.name, **kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "listing blocked sessions") from exc
        items = [
            dict(i) for i in response.get("Items", []) if i[TROUBLE_BY_TIME.sort_key]["S"] != before
        ]
        kept = items[:limit]
        token = None
        if len(items) > limit or ("LastEvaluatedKey" in response and kept):
            last = kept[-1][TROUBLE_BY_TIME.sort_key]["S"]
            token = page_tokens.encode_key(tenant, PAGE_SCOPE, last)
        return TroublePage([_mark(tenant, item) for item in kept], token)
