"""The listing of sessions in trouble: a page of the tenant's trouble index (newest
first), each session read at once and shown in the state every other view derives."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from chalicelib.admin.requests import SessionsQuery
from chalicelib.clock import iso_utc
from chalicelib.quota.core import SessionKey, SessionSnapshot
from chalicelib.storage.ports import SessionCounters, TroubleIndex, TroubleMark

if TYPE_CHECKING:
    from chalicelib.api.schemas import ListedSession, SessionListing, SessionView

# At most this many reads of the index per page, each one day's (one Query): a listing of
# the last 24 hours (the default) reads at most two days. A state filter that drops most
# sessions, or a quiet stretch of days, gives a shorter page and a `next`, never a walk of
# the whole index.
ROUNDS = 2
READERS = 8  # sessions of a page read at once


def read_all(counters: SessionCounters, keys: Sequence[SessionKey]) -> list[SessionSnapshot | None]:
    """Each session as stored, read on up to READERS threads at once.

    Raises:
        StorageError: a read failed (raised once every read has finished).
    """
    results: list[SessionSnapshot | None] = [None] * len(keys)
    errors: list[BaseException] = []

    def run(indexes: range) -> None:
        try:
            for i in indexes:
                results[i] = counters.get(keys[i])
        except BaseException as exc:  # handed to the caller below
            errors.append(exc)

    lanes = [range(start, len(keys), READERS) for start in range(min(READERS, len(keys)))]
    # Daemon threads: nothing for the interpreter to join at exit.
    threads = [threading.Thread(target=run, args=(lane,), daemon=True) for lane in lanes[1:]]
    for thread in threads:
        thread.start()
    if lanes:
        run(lanes[0])
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def list_sessions(
    tenant: str,
    query: SessionsQuery,
    trouble: TroubleIndex,
    counters: SessionCounters,
    view: Callable[[SessionKey, SessionSnapshot], SessionView],
    now_ms: int,
) -> SessionListing:
    """A page of the sessions in trouble since `query.since_ms`, newest first, each as
    the next check would see it, kept if it is in `query.state` (any, if None).

    Raises:
        BadPageToken: `query.next_token` is not one this listing issued.
        StorageError: the store failed.
    """
    rows: list[ListedSession] = []
    listed: set[str] = set()  # a session marked on two days shows once, at its newest
    token = query.next_token
    for _ in range(ROUNDS):
        page = trouble.page(tenant, query.since_ms, now_ms, query.limit - len(rows), token)
        token = page.next_token
        keys = [SessionKey(tenant, mark.session_id) for mark in page.marks]
        for mark, key, snapshot in zip(page.marks, keys, read_all(counters, keys), strict=True):
            if snapshot is None or mark.session_id in listed:
                continue  # its counters are gone, or it is on the page already
            listed.add(mark.session_id)
            row = view(key, snapshot)
            if query.state is not None and row["state"] != query.state:
                continue
            rows.append(_listed(row, mark))
        if token is None or len(rows) >= query.limit:
            break
    return {"sessions": rows, "next": token}


def _listed(row: SessionView, mark: TroubleMark) -> ListedSession:
    return {
        **row,
        "listing_state": row["state"],  # the one derivation, as every view shows it
        "trouble": {
            "kind": mark.kind.value,
            "at": iso_utc(mark.at_ms),
            "category": mark.category,
        },
    }
