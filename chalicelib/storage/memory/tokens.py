"""In-memory bearer tokens."""

from __future__ import annotations

import threading
from dataclasses import replace

from chalicelib.storage.ports import (
    RecordNotFound,
    StoreRejected,
)
from chalicelib.storage.records import TokenRecord


class MemoryTokens:
    """The tokens port in a dict by token id."""

    def __init__(self) -> None:
        self._tokens: dict[str, TokenRecord] = {}
        self._lock = threading.Lock()

    def put(self, record: TokenRecord) -> None:
        """Store a new token.

        Raises:
            StoreRejected: the id is taken.
        """
        with self._lock:
            if record.token_id in self._tokens:
                raise StoreRejected("storing a token", "ConditionalCheckFailed")
            self._tokens[record.token_id] = replace(record, name=record.name or "-")

    def get(self, token_id: str) -> TokenRecord | None:
        """A token by its public id."""
        with self._lock:
            return self._tokens.get(token_id)

    def revoke(self, token_id: str, now_ms: int) -> TokenRecord:
        """Mark a token revoked; the first revocation time is kept.

        Raises:
            RecordNotFound: no such token.
        """
        with self._lock:
            record = self._tokens.get(token_id)
            if record is None:
                raise RecordNotFound("revoking a token")
            if record.revoked_at_ms is None:
                record = replace(record, revoked_at_ms=now_ms)
                self._tokens[token_id] = record
            return record

    def list(self, tenant: str | None = None) -> list[TokenRecord]:
        """All tokens, optionally of one tenant, oldest first."""
        with self._lock:
            records = [r for r in self._tokens.values() if tenant in (None, r.tenant)]
        return sorted(records, key=lambda r: r.created_at_ms)
