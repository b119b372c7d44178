"""In-memory grants, bearer tokens, link uses, call results and the trouble index: each a
keyed table (a dict under one lock, whose conditional write is one compare-and-set)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Hashable
from dataclasses import replace
from functools import partial
from typing import Generic, TypeVar

from chalicelib.quota.core import call_id_key
from chalicelib.quota.grants import Grant
from chalicelib.quota.results import CallResult, ResultKey, canonical
from chalicelib.storage.errors import RecordNotFound, StoreRejected
from chalicelib.storage.records import LinkUse, TokenRecord, TroubleMark, TroublePage
from chalicelib.storage.trouble_pages import DAY_MS, day_page

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Keyed(Generic[K, V]):
    """Rows by key, under one lock."""

    def __init__(self) -> None:
        self._rows: dict[K, V] = {}
        self._lock = threading.Lock()

    def swap(self, key: K, new: Callable[[V | None], V | None]) -> V | None:
        """Put `new(old)` in the row if it is not None, atomically; returns the old row."""
        with self._lock:
            old = self._rows.get(key)
            value = new(old)
            if value is not None:
                self._rows[key] = value
            return old

    def put_new(self, key: K, value: V, doing: str) -> None:
        """Raises: StoreRejected: the key is taken."""
        if self.swap(key, lambda old: value if old is None else None) is not None:
            raise StoreRejected(doing, "ConditionalCheckFailed")

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._rows.get(key)

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._rows.pop(key, None)

    def rows(self, where: Callable[[K], bool]) -> list[V]:
        with self._lock:
            return [value for key, value in self._rows.items() if where(key)]


class MemoryGrants(Keyed[tuple[str, str], Grant]):
    """The grants port (`GrantRepository`), by tenant and grant id."""

    def put(self, grant: Grant) -> None:
        """Raises: StoreRejected: the id is taken."""
        self.put_new((grant.tenant, grant.grant_id), grant, "storing a grant")

    def list(self, tenant: str) -> list[Grant]:
        return sorted(self.rows(lambda key: key[0] == tenant), key=lambda g: g.grant_id)

    def delete(self, tenant: str, grant_id: str) -> Grant:
        """Raises: RecordNotFound: no such grant in this tenant."""
        grant = self.pop((tenant, grant_id))
        if grant is None:
            raise RecordNotFound("deleting a grant")
        return grant


class MemoryTokens(Keyed[str, TokenRecord]):
    """The tokens port (`TokenRepository`), by token id."""

    def put(self, record: TokenRecord) -> None:
        """Raises: StoreRejected: the id is taken."""
        self.put_new(record.token_id, replace(record, name=record.name or "-"), "storing a token")

    def revoke(self, token_id: str, now_ms: int) -> TokenRecord:
        """Mark a token revoked; the first revocation time is kept.

        Raises:
            RecordNotFound: no such token.
        """

        def revoked(old: TokenRecord | None) -> TokenRecord | None:
            return (
                None
                if old is None or old.revoked_at_ms is not None
                else replace(old, revoked_at_ms=now_ms)
            )

        old = self.swap(token_id, revoked)
        if old is None:
            raise RecordNotFound("revoking a token")
        return old if old.revoked_at_ms is not None else replace(old, revoked_at_ms=now_ms)

    def list(self, tenant: str | None = None) -> list[TokenRecord]:
        records = self.rows(lambda _: True)
        mine = [r for r in records if tenant in (None, r.tenant)]
        return sorted(mine, key=lambda r: r.created_at_ms)


class MemoryLinkUses(Keyed[tuple[str, str], LinkUse]):
    """The single use of action links (`LinkUses`)."""

    def claim(self, use: LinkUse) -> LinkUse | None:
        """None if the link is now ours, else the use that took it first."""
        return self.swap((use.tenant, use.link_id), lambda old: use if old is None else None)

    def find(self, tenant: str, link_id: str) -> LinkUse | None:
        return self.get((tenant, link_id))

    def release(self, tenant: str, link_id: str) -> None:
        self.pop((tenant, link_id))


def _copy(result: CallResult) -> CallResult:
    """A copy no caller can change under the store, as the JSON the table would hold."""
    body = None if result.result is None else json.loads(canonical(result.result))
    return replace(result, result=body)


class MemoryResults:
    """Call results (`CallResults`); the first live write wins, as on DynamoDB."""

    def __init__(self) -> None:
        self._results = Keyed[tuple[str, str, str], CallResult]()

    @staticmethod
    def _slot(key: ResultKey) -> tuple[str, str, str]:
        return (key.tenant, key.session_id, call_id_key(key.call_id))

    def put_first(self, result: CallResult) -> CallResult | None:
        """None if `result` is now kept, else the live result kept first."""

        def first(old: CallResult | None) -> CallResult | None:
            return _copy(result) if old is None or old.expires_ms <= result.stored_ms else None

        old = self._results.swap(self._slot(result.key), first)
        return _copy(old) if old is not None and old.expires_ms > result.stored_ms else None

    def get(self, key: ResultKey) -> CallResult | None:
        found = self._results.get(self._slot(key))
        return None if found is None else _copy(found)


class MemoryTroubleIndex(Keyed[tuple[str, int, str], TroubleMark]):
    """The sessions in trouble (`TroubleIndex`): an entry per session per UTC day, read
    a day at a time, as on DynamoDB."""

    def mark(self, mark: TroubleMark) -> None:
        """Record a session's latest trouble (overwrites its entry of that day)."""
        self.swap((mark.tenant, mark.at_ms // DAY_MS, mark.session_id), lambda _: mark)

    def page(
        self, tenant: str, since_ms: int, until_ms: int, limit: int, next_token: str | None = None
    ) -> TroublePage:
        """`TroubleIndex.page` (`trouble_pages.day_page`) over the marks in memory.

        Raises:
            BadPageToken: the page token is not one this listing issued.
        """
        return day_page(tenant, since_ms, until_ms, limit, next_token, partial(self._day, tenant))

    def _day(self, tenant: str, day_ms: int) -> list[TroubleMark]:
        return self.rows(lambda key: key[:2] == (tenant, day_ms // DAY_MS))
