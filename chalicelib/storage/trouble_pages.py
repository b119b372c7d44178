"""A page of the index of sessions in trouble, the same on every backend: one UTC day at a
time, newest first, the token going on below the page's last entry or with the day before.
An adapter only reads a day's marks."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from chalicelib.storage import page_tokens
from chalicelib.storage.ports import TroubleMark, TroublePage

PAGE_SCOPE = "trouble"
DAY_MS = 86_400_000
_END_OF_MS = "#~"  # sorts after "#<session id>" of the same millisecond


def _key(mark: TroubleMark) -> str:
    """The listing's order: time, then session id."""
    return f"{mark.at_ms:013d}#{mark.session_id}"


def day_page(
    tenant: str,
    since_ms: int,
    until_ms: int,
    limit: int,
    next_token: str | None,
    day: Callable[[int], Iterable[TroubleMark]],
) -> TroublePage:
    """Up to `limit` of the tenant's marks from `since_ms` to `until_ms`, newest first,
    from the one day `day(ms)` reads (the day of `ms`).

    Raises:
        BadPageToken: the page token is not one this listing issued.
        StorageError: the store failed.
    """
    # Below `high`, exclusive: the previous page's last entry, or the end of a
    # millisecond, which no entry equals.
    high = f"{until_ms:013d}{_END_OF_MS}"
    if next_token is not None:
        high = min(high, page_tokens.decode_key(next_token, tenant, PAGE_SCOPE))
    high_ms = int(high[:13])
    if high_ms < since_ms:
        return TroublePage([], None)
    marks = [m for m in day(high_ms) if m.at_ms >= since_ms and _key(m) < high]
    newest = sorted(marks, key=_key, reverse=True)
    kept = newest[:limit]
    day_start = high_ms - high_ms % DAY_MS
    if len(newest) > limit:
        token: str | None = page_tokens.encode_key(tenant, PAGE_SCOPE, _key(kept[-1]))
    elif day_start > since_ms:
        # The day is done: the next page is the day before.
        token = page_tokens.encode_key(tenant, PAGE_SCOPE, f"{day_start - 1:013d}{_END_OF_MS}")
    else:
        token = None
    return TroublePage(kept, token)
