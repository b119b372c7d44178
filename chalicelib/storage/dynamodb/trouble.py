"""The tenant's index of sessions in trouble (blocked or suspended), on the audit table:
one item per session, overwritten by the session's latest trouble. Written when a
session's budget runs out (its last unit taken, or its first refusal), a principal is
escalated or a session is suspended; never by any other allowed check.

Item: pk "<tenant># trouble" (a space, which no session id holds), sk the session id,
kind, at, category, principal, trouble_day "<tenant> <YYYY-MM-DD>" (UTC),
trouble_at "<13-digit ms>#<session id>", expires_at (TTL, clean-up only: listings bound
`at` themselves).

The index `trouble_by_day` on (trouble_day, trouble_at) lists a day's entries newest
first; overwriting a session's item moves it to its new day. A page is one Query of one
day, bounded by the page size: its cost does not grow with the tenant's history.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.schema import TROUBLE_BY_DAY
from chalicelib.storage import page_tokens
from chalicelib.storage.dynamodb.updates import n, s
from chalicelib.storage.faults import translate
from chalicelib.storage.ports import TroubleKind, TroubleMark, TroublePage

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_DAY_NEWEST_FIRST = "#day = :day AND #at BETWEEN :lo AND :hi"
KEEP_DAYS = 30
PAGE_SCOPE = "trouble"
DAY_MS = 86_400_000
_END_OF_MS = "#~"  # sorts after "#<session id>" of the same millisecond


def _pk(tenant: str) -> str:
    return f"{tenant}# trouble"


def _day(tenant: str, at_ms: int) -> str:
    return f"{tenant} {time.strftime('%Y-%m-%d', time.gmtime(at_ms // 1000))}"


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
            TROUBLE_BY_DAY.partition_key: s(_day(mark.tenant, mark.at_ms)),
            TROUBLE_BY_DAY.sort_key: s(_at_key(mark.at_ms, mark.session_id)),
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
        self, tenant: str, since_ms: int, until_ms: int, limit: int, next_token: str | None = None
    ) -> TroublePage:
        """Up to `limit` entries from `since_ms` to `until_ms`, newest first: one Query of
        one day; at the day's end the token goes on with the day before.

        Raises:
            BadPageToken: the page token is not one this listing issued.
            StorageError: the store failed.
        """
        # The highest key of the page, inclusive: the previous page's last entry, read
        # again and dropped, or the end of a millisecond, which no entry equals.
        high = f"{until_ms:013d}{_END_OF_MS}"
        if next_token is not None:
            high = min(high, page_tokens.decode_key(next_token, tenant, PAGE_SCOPE))
        low = f"{since_ms:013d}"
        if high < low:
            return TroublePage([], None)
        high_ms = int(high[:13])
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": _DAY_NEWEST_FIRST,
            "ExpressionAttributeNames": {
                "#day": TROUBLE_BY_DAY.partition_key,
                "#at": TROUBLE_BY_DAY.sort_key,
            },
            "ExpressionAttributeValues": {
                ":day": s(_day(tenant, high_ms)),
                ":lo": s(low),
                ":hi": s(high),
            },
            "ScanIndexForward": False,
            "Limit": limit + 2,
        }
        try:
            response = self._client.query(IndexName=TROUBLE_BY_DAY.name, **kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise translate(exc, "listing blocked sessions") from exc
        key = TROUBLE_BY_DAY.sort_key
        items = [dict(i) for i in response.get("Items", []) if i[key]["S"] != high]
        kept = items[:limit]
        if len(items) > limit or ("LastEvaluatedKey" in response and kept):
            last = kept[-1][key]["S"]
        elif "LastEvaluatedKey" in response:
            last = response["LastEvaluatedKey"][key]["S"]
        else:
            day_start = high_ms - high_ms % DAY_MS
            # The day is done: the next page is the day before, if the listing reaches it.
            last = f"{day_start - 1:013d}{_END_OF_MS}" if day_start > since_ms else ""
        token = page_tokens.encode_key(tenant, PAGE_SCOPE, last) if last else None
        return TroublePage([_mark(tenant, item) for item in kept], token)
