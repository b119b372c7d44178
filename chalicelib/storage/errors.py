"""What storage may raise: what went wrong, never how to say it over HTTP (one place,
`chalicelib.errors`, maps these to answers)."""

from __future__ import annotations

from chalicelib.quota.writes import WriteId


class StorageError(Exception):
    """Base of the errors every adapter raises; `chalicelib.errors` maps them."""

    def __init__(self, doing: str) -> None:
        super().__init__(doing)
        self.doing = doing  # what the service was doing, e.g. "counting a call"


class StoreUnavailable(StorageError):
    """Throttled or unreachable: retrying later may work."""

    def __init__(self, doing: str, retry_after_seconds: int = 1, throttled: bool = False) -> None:
        super().__init__(doing)
        self.retry_after_seconds = retry_after_seconds
        self.throttled = throttled


class WriteUncertain(StoreUnavailable):
    """A budget write (a take, a give-back) whose answer never came: a timeout or a
    server error, after which the store may have applied it. `write` names it: a
    give-back is sent again under it (applied once), a take is given back only if the
    store applied it (`BudgetCounters.give_back_if_taken`)."""

    def __init__(self, doing: str, write: WriteId, retry_after_seconds: int = 1) -> None:
        super().__init__(doing, retry_after_seconds)
        self.write = write


class StoreMisconfigured(StorageError):
    """A table or permission the service needs is missing."""

    def __init__(self, doing: str, code: str) -> None:
        super().__init__(doing)
        self.code = code


class StoreRejected(StorageError):
    """The store refused a request for a reason that retrying will not fix."""

    def __init__(self, doing: str, code: str) -> None:
        super().__init__(doing)
        self.code = code


class RecordChanged(StorageError):
    """A conditional update failed: the record changed since it was read."""


class RecordNotFound(StorageError):
    """The addressed record does not exist."""


class BadPageToken(StorageError):
    """A page token that this listing did not issue."""
