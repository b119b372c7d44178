"""In-memory record of used email links."""

from __future__ import annotations

import threading

from chalicelib.storage.ports import (
    LinkUse,
)


class MemoryLinkUses:
    """The single use of action links in a dict, under one lock."""

    def __init__(self) -> None:
        self._uses: dict[tuple[str, str], LinkUse] = {}
        self._lock = threading.Lock()

    def claim(self, use: LinkUse) -> LinkUse | None:
        """None if the link is now ours, else the use that took it first."""
        with self._lock:
            key = (use.tenant, use.link_id)
            earlier = self._uses.get(key)
            if earlier is not None:
                return earlier
            self._uses[key] = use
            return None

    def find(self, tenant: str, link_id: str) -> LinkUse | None:
        """The use that took the link, if any."""
        with self._lock:
            return self._uses.get((tenant, link_id))

    def release(self, tenant: str, link_id: str) -> None:
        """Give a link back after its action failed."""
        with self._lock:
            self._uses.pop((tenant, link_id), None)
