"""In-memory grants."""

from __future__ import annotations

import threading

from chalicelib.quota.grants import Grant
from chalicelib.storage.ports import (
    RecordNotFound,
    StoreRejected,
)


class MemoryGrants:
    """The grants port in a dict per tenant."""

    def __init__(self) -> None:
        self._grants: dict[str, dict[str, Grant]] = {}
        self._lock = threading.Lock()

    def put(self, grant: Grant) -> None:
        """Store a new grant.

        Raises:
            StoreRejected: the id is taken.
        """
        with self._lock:
            grants = self._grants.setdefault(grant.tenant, {})
            if grant.grant_id in grants:
                raise StoreRejected("storing a grant", "ConditionalCheckFailed")
            grants[grant.grant_id] = grant

    def list(self, tenant: str) -> list[Grant]:
        """All grants of a tenant, in id order."""
        with self._lock:
            grants = self._grants.get(tenant, {})
            return [grants[k] for k in sorted(grants)]

    def delete(self, tenant: str, grant_id: str) -> Grant:
        """Delete a grant; returns it.

        Raises:
            RecordNotFound: no such grant in this tenant.
        """
        with self._lock:
            grant = self._grants.get(tenant, {}).pop(grant_id, None)
        if grant is None:
            raise RecordNotFound("deleting a grant")
        return grant
