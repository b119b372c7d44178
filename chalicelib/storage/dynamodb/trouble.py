"""The tenant's index of sessions in trouble (blocked or suspended), on the audit table:
a partition per tenant per day, each holding the day's entries packed in a few shard
items, so that a page reads one day in one Query (two days for the default 24 h), and
its cost follows the day's entries, never the tenant's history. Written when a session's
budget runs out (its last unit taken, or its first refusal), a principal is escalated or
a session is suspended; never by any other allowed check.

Item: pk "<tenant># trouble <YYYY-MM-DD>" (UTC; the space keeps it apart from every
session's partition), sk the shard "00".."63" (a hash of the session id, so a session
always lands in the same one), expires_at (TTL, clean-up only), and one attribute per
session, "s:<session id>" = "<13-digit ms>|<kind>|<category>|<principal>". A session
marked again the same day overwrites its own entry; one marked on a later day is listed
from the later day (a listing reads each day once and keeps a session's newest entry).
"""

from __future__ import annotations

import time
import zlib
from functools import partial

from chalicelib.storage.dynamodb.updates import Table, all_items, call, n, s
from chalicelib.storage.ports import TroubleKind, TroubleMark, TroublePage
from chalicelib.storage.trouble_pages import day_page

_MARK = "SET #entry = :entry, #exp = :exp"
_DAY = "#pk = :pk"
KEEP_DAYS = 30
SHARDS = 64  # each under DynamoDB's 400 KB item: room for about 250,000 entries a day
_ENTRY = "s:"  # attribute-name prefix of an entry; no other attribute starts with it


def _pk(tenant: str, at_ms: int) -> str:
    return f"{tenant}# trouble {time.strftime('%Y-%m-%d', time.gmtime(at_ms // 1000))}"


def _shard(session_id: str) -> str:
    return f"{zlib.crc32(session_id.encode('utf-8')) % SHARDS:02d}"


def _entry(mark: TroubleMark) -> str:
    return "|".join(
        (f"{mark.at_ms:013d}", mark.kind.value, mark.category or "", mark.principal or "")
    )


def _mark(tenant: str, session_id: str, entry: str) -> TroubleMark:
    at, kind, category, principal = entry.split("|", 3)
    return TroubleMark(
        tenant, session_id, TroubleKind(kind), int(at), category or None, principal or None
    )


class TroubleStore(Table):
    """Marks and lists the sessions in trouble."""

    def mark(self, mark: TroubleMark) -> None:
        """Record a session's latest trouble (overwrites its entry of that day).

        Raises:
            StorageError: the store failed.
        """
        call(
            lambda: self._client.update_item(
                TableName=self._table,
                Key={"pk": s(_pk(mark.tenant, mark.at_ms)), "sk": s(_shard(mark.session_id))},
                UpdateExpression=_MARK,
                ExpressionAttributeNames={"#entry": _ENTRY + mark.session_id, "#exp": "expires_at"},
                ExpressionAttributeValues={
                    ":entry": s(_entry(mark)),
                    ":exp": n(mark.at_ms // 1000 + KEEP_DAYS * 86_400),
                },
            ),
            "indexing a blocked session",
        )

    def _day(self, tenant: str, day_ms: int) -> list[TroubleMark]:
        """Every entry of one day: one Query (more only past 1 MB of entries)."""
        names, values = {"#pk": "pk"}, {":pk": s(_pk(tenant, day_ms))}
        items = all_items(
            lambda start: self._client.query(**self._query(_DAY, names, values, start)),
            "listing blocked sessions",
        )
        return [
            _mark(tenant, name.removeprefix(_ENTRY), value["S"])
            for item in items
            for name, value in item.items()
            if name.startswith(_ENTRY)
        ]

    def page(
        self, tenant: str, since_ms: int, until_ms: int, limit: int, next_token: str | None = None
    ) -> TroublePage:
        """`TroubleIndex.page` (`trouble_pages.day_page`), a day read by `_day`.

        Raises:
            BadPageToken: the page token is not one this listing issued.
            StorageError: the store failed.
        """
        return day_page(tenant, since_ms, until_ms, limit, next_token, partial(self._day, tenant))
