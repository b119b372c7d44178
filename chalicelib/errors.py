"""Every fault the service reports, each with the HTTP status it maps to, and the one
mapping from storage errors to them.

A blocked call is not here: it is a normal outcome, returned as a `Decision`.
"""

from __future__ import annotations

from chalicelib.storage import ports


class QuotaServiceError(Exception):
    """Base of every error the API turns into a JSON error response."""

    STATUS_CODE = 500
    CODE = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, object]:
        """The JSON error body for this error."""
        return {"error": {"code": self.CODE, "message": self.message}}

    def headers(self) -> dict[str, str]:
        """Extra response headers for this error."""
        return {}


class InvalidRequest(QuotaServiceError):
    """The request body or parameters are malformed; names the offending field."""

    STATUS_CODE = 400
    CODE = "invalid_request"

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field

    def body(self) -> dict[str, object]:
        error: dict[str, object] = {"code": self.CODE, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        return {"error": error}


class InvalidPageToken(InvalidRequest):
    """A page token this listing did not issue (or issued for another scope)."""

    CODE = "bad_page_token"

    def __init__(self) -> None:
        super().__init__(
            "Parameter 'next' is not a page token this listing issued: send the 'next' of "
            "the previous page of the same listing, unchanged, or none for the first page.",
            "next",
        )


class SessionTokenInvalid(InvalidRequest):
    """A check echoes a `session_token` this service did not mint (forged, altered, or
    another tenant's): nothing is counted."""

    CODE = "session_token_invalid"

    def __init__(self, tool: str) -> None:
        super().__init__(
            f"The tool '{tool}' was NOT run: the session sent back "
            '(`_meta["io.mcp-quota/session"]`) is not a session this service minted for '
            "this tenant (forged, altered, or signed by a key no longer held); nothing was "
            "counted. Send back the one an earlier result carried, unchanged, or none: the "
            "call is then counted in the session derived from who calls.",
            "session_token",
        )


class SessionTokenOtherPrincipal(InvalidRequest):
    """A check for one principal echoes a session minted for another: a session is one
    principal's, so nothing is counted."""

    CODE = "session_token_other_principal"

    def __init__(self, tool: str, minted_for: str, principal: str) -> None:
        super().__init__(
            f"The tool '{tool}' was NOT run: the session sent back "
            f'(`_meta["io.mcp-quota/session"]`) was minted for principal {minted_for!r}, '
            f"but this call is for principal {principal!r}; nothing was counted. A session "
            "belongs to one principal: send none, and the call is counted in a session of "
            f"{principal!r}'s own.",
            "session_token",
        )


class PayloadTooLarge(QuotaServiceError):
    """The request body is larger than the service accepts."""

    STATUS_CODE = 413
    CODE = "payload_too_large"


class Unauthorized(QuotaServiceError):
    """The token is not (or no longer) valid: unknown, revoked or expired."""

    STATUS_CODE = 401
    CODE = "unauthorized"


class Forbidden(QuotaServiceError):
    """The token is valid but its role may not do this."""

    STATUS_CODE = 403
    CODE = "forbidden"


class PrincipalNotAllowed(Forbidden):
    """A check claims a principal its server token is not bound to."""

    CODE = "principal_not_allowed"
    SHOWN = 5  # allowed principals named in the message; the rest are counted

    def __init__(self, token_id: str, principal: str, allowed: tuple[str, ...]) -> None:
        own = f"token:{token_id}"
        if principal.startswith("token:"):
            why = "principals starting with 'token:' are reserved, each for its own token"
        elif allowed:
            names = ", ".join(repr(p) for p in allowed[: self.SHOWN])
            more = f" and {len(allowed) - self.SHOWN} more" if len(allowed) > self.SHOWN else ""
            why = f"its allowed principals are {names}{more}"
        else:
            why = "its allowed principals are none"
        super().__init__(
            f"Token {token_id} may not act for principal {principal!r}: {why}. Send no "
            f"principal (the call then counts as {own!r}), or bind a server token to it: "
            'POST /v1/tokens with "principals" (exact names or * patterns).'
        )
        self.token_id = token_id
        self.principal = principal


class MethodNotAllowed(QuotaServiceError):
    """The route exists, but not with this HTTP method; `Allow` names the ones it has."""

    STATUS_CODE = 405
    CODE = "method_not_allowed"

    def __init__(self, message: str, allow: str) -> None:
        super().__init__(message)
        self.allow = allow

    def headers(self) -> dict[str, str]:
        return {"Allow": self.allow} if self.allow else {}


class NotFound(QuotaServiceError):
    """The addressed resource does not exist for this tenant."""

    STATUS_CODE = 404
    CODE = "not_found"


class Conflict(QuotaServiceError):
    """The request is valid but contradicts the current state."""

    STATUS_CODE = 409
    CODE = "conflict"


class CallIdConflict(Conflict):
    """A call id already counted for another tool or category in this session: an id
    names one call, so it can never stand for a different one."""

    CODE = "call_id_conflict"


class CallInProgress(Conflict):
    """A copy of a call whose check is still counting it at the wider scopes: it is not
    allowed (the original may yet be refused there); try again in a moment, when the
    original has been admitted (the copy is then a duplicate) or refused (it is counted
    anew)."""

    CODE = "call_in_progress"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "1"}


class ResultConflict(Conflict):
    """Another result is already kept under this call id: the first store wins."""

    CODE = "result_conflict"


class CallNotAllowed(Forbidden):
    """A result for a call id this session did not allow and count for this tool (or
    not yet at every scope): a token can keep results only of calls it made."""

    CODE = "call_not_allowed"


class StoreUnavailableError(QuotaServiceError):
    """The counter store is throttled or unreachable; the caller should retry later."""

    STATUS_CODE = 503
    CODE = "store_unavailable"

    def __init__(self, message: str, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_seconds)}


class StoreMisconfiguredError(QuotaServiceError):
    """The store answered, but a table or permission the service needs is missing."""

    STATUS_CODE = 503
    CODE = "store_misconfigured"

    def headers(self) -> dict[str, str]:
        return {"Retry-After": "30"}


class Misconfigured(QuotaServiceError):
    """The deployment's configuration (its quota policy) cannot work; the log names the
    problem. Nothing is decided until an operator fixes it, so the caller retries."""

    STATUS_CODE = 503
    CODE = "misconfigured"
    RETRY_AFTER_SECONDS = 60

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.RETRY_AFTER_SECONDS)}


def from_storage(exc: ports.StorageError) -> QuotaServiceError:
    """The service error for a storage error: the one place storage faults get words."""
    doing = exc.doing
    if isinstance(exc, ports.StoreUnavailable):
        if exc.throttled:
            return StoreUnavailableError(
                f"The quota store is throttled while {doing}; retry shortly."
            )
        return StoreUnavailableError(
            f"The quota store could not be reached while {doing}; retry.", exc.retry_after_seconds
        )
    if isinstance(exc, ports.StoreMisconfigured):
        return StoreMisconfiguredError(
            f"The quota store is misconfigured ({exc.code}) while {doing}."
        )
    if isinstance(exc, ports.RecordChanged):
        return StoreUnavailableError(f"The session kept changing while {doing}; retry.")
    if isinstance(exc, ports.RecordNotFound):
        return NotFound(f"Nothing to act on while {doing}: it does not exist.")
    if isinstance(exc, ports.BadPageToken):
        return InvalidPageToken()
    code = exc.code if isinstance(exc, ports.StoreRejected) else type(exc).__name__
    return QuotaServiceError(f"The quota store rejected a request ({code}) while {doing}.")
