"""The one place where botocore errors become the service's own errors."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.errors import QuotaServiceError, StoreMisconfigured, StoreUnavailable

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


def translate(exc: ClientError | BotoCoreError, what: str) -> QuotaServiceError:
    """Map a botocore error raised while doing `what` to a service error."""
    if isinstance(exc, BotoCoreError):
        return StoreUnavailable(f"The quota store could not be reached while {what}; retry.", 2)
    code = error_code(exc)
    if code in _THROTTLED:
        return StoreUnavailable(f"The quota store is throttled while {what}; retry shortly.", 1)
    if code in _UNAVAILABLE:
        return StoreUnavailable(f"The quota store is unavailable while {what}; retry.", 2)
    if code in _MISCONFIGURED:
        return StoreMisconfigured(f"The quota store is misconfigured ({code}) while {what}.")
    return QuotaServiceError(f"The quota store rejected a request ({code}) while {what}.")
