"""The one place where botocore errors become storage errors."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.storage.ports import (
    StorageError,
    StoreMisconfigured,
    StoreRejected,
    StoreUnavailable,
)

_THROTTLED = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "LimitExceededException",
    }
)
_UNAVAILABLE = frozenset({"InternalServerError", "ServiceUnavailable", "InternalFailure"})
_MISCONFIGURED = frozenset(
    {"ResourceNotFoundException", "AccessDeniedException", "UnrecognizedClientException"}
)


def error_code(exc: ClientError) -> str:
    """The AWS error code of a ClientError."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def translate(exc: ClientError | BotoCoreError, doing: str) -> StorageError:
    """Map a botocore error raised while `doing` something to a storage error."""
    if isinstance(exc, BotoCoreError):
        return StoreUnavailable(doing, retry_after_seconds=2)
    code = error_code(exc)
    if code in _THROTTLED:
        return StoreUnavailable(doing, retry_after_seconds=1, throttled=True)
    if code in _UNAVAILABLE:
        return StoreUnavailable(doing, retry_after_seconds=2)
    if code in _MISCONFIGURED:
        return StoreMisconfigured(doing, code)
    return StoreRejected(doing, code)
