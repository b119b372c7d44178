"""The session item's expressions that are neither an admission rule (`quota.rules`,
rendered by `conditions`) nor a change (`quota.changes`, rendered by `changes`): the
lists' shape and their trim."""

from __future__ import annotations

from chalicelib.storage.dynamodb.layout import (
    CALL_IDS,
    CALLS,
    EXPIRES,
    LAST_SEEN,
    PK,
    STARTED,
    SUSPENDED,
)

BASE_NAMES = {
    "#pk": PK,
    "#ls": LAST_SEEN,
    "#started": STARTED,
    "#exp": EXPIRES,
    "#calls": CALLS,
    "#ids": CALL_IDS,
    "#sus": SUSPENDED,
}

# A write that shifts the full list holds only if the list still ends as remembered.
SAME_TAIL = "size(#ids) = :len AND #ids[{last}] = :tail"
# A trim holds only while the lists are still at least as long as seen.
TRIM_CONDITION = "size(#calls) >= :min AND size(#ids) >= :min"
