"""This process's writers of budget records (`quota.writes`): one per thread."""

from __future__ import annotations

import itertools
import threading
import uuid

from chalicelib.quota.writes import PER_MS, WriteId


class Writers:
    """This process's writers: one per thread, each numbering its writes."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._ids = itertools.count()

    def next(self, now_ms: int) -> WriteId:
        """The calling thread's next write, numbered after its last (and from `now_ms`)."""
        local = self._local
        if not hasattr(local, "writer"):
            local.writer = f"{uuid.uuid4().hex[:8]}{next(self._ids):x}"
            local.seq = 0
        local.seq = max(local.seq + 1, now_ms * PER_MS)
        return WriteId(local.writer, local.seq)

    def retire(self) -> WriteId:
        """The calling thread's last write, whose answer never came; the thread writes
        under a new writer from now on, so that whether the store applied that write
        stays told by the record (its writer's number there is the write's, or lower),
        whatever the thread writes next, and it can be sent again from any thread."""
        local = self._local
        last = WriteId(local.writer, local.seq)
        del local.writer
        return last
