"""What a route knows about its request: the container, the caller's identity, the JSON
body and the path parameters, each validated."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from chalice.app import Request, Response

from chalicelib.api.deferred import (
    admin_requests,
    errors,
    lambda_hold,
    quota,
    responses,
    roles,
    tokens,
    validation,
    wiring,
)
from chalicelib.lazy import collector_paused
from chalicelib.observability import logger

METHOD_NOT_ALLOWED = 405

_container: wiring.Container | None = None
_first_request_done = False


def deps() -> wiring.Container:
    """The per-container dependencies, built on first use."""
    global _container
    if _container is None:
        _container = wiring.Container()
    return _container


def flush_held() -> None:
    """At shutdown: record what runaway loops hold back, if this container built the
    check (building it then would read the settings and the policy for nothing)."""
    checks = vars(_container).get("checks") if _container is not None else None
    if checks is not None:
        checks.flush_held()


def reset_dependencies(container: wiring.Container | None = None) -> None:
    """Replace the dependencies (tests: a fixed clock, settings, or a fresh moto)."""
    global _container
    _container = container


def on_request(request: Request, get_response: Callable[[Request], Response]) -> Response:
    """HTTP middleware: every log line of the request carries its id, the first request
    through API Gateway teaches the container the API's base URL, and Chalice's own
    answer for a method the route lacks takes the service's error shape. A container's
    first request, which imports what its route needs, runs with the garbage collector
    paused (`lazy.collector_paused`)."""
    global _first_request_done
    try:
        if _first_request_done:
            return answer(request, get_response)
        with collector_paused():
            response = answer(request, get_response)
        _first_request_done = True
        return response
    finally:
        lambda_hold.answered(_request_id(request))  # on Lambda, the hold may end it


def _request_id(request: Request) -> str | None:
    """The Lambda invocation's request id (None off Lambda)."""
    context = getattr(request, "lambda_context", None)
    request_id = getattr(context, "aws_request_id", None)
    return request_id if isinstance(request_id, str) else None


def answer(request: Request, get_response: Callable[[Request], Response]) -> Response:
    """The route's response to the request (see `on_request`)."""
    logger.set_correlation_id(request.context.get("requestId"))
    learn_base_url(request.headers, request.context)
    response = get_response(request)
    if response.status_code == METHOD_NOT_ALLOWED:
        # Only Chalice's routing answers 405 (no service error has that status).
        return method_not_allowed(request, str(response.headers.get("Allow", "")))
    return response


def method_not_allowed(request: Request, allow: str) -> Response:
    """The service's 405 for a method the route has not, naming the ones it has."""
    method = request.method if request.method.isalpha() and len(request.method) <= 16 else ""
    route = request.context.get("resourcePath", "this route")
    message = f"{route} does not accept {method or 'this method'}; it accepts {allow}."
    return responses.error_response(errors.MethodNotAllowed(message, allow))


def learn_base_url(headers: Any, context: dict[str, Any]) -> None:
    """The API's base URL as API Gateway serves it, for the email's links when no
    QUOTA_PUBLIC_URL is set: only its own execute-api host name is trusted."""
    container = deps()
    if container.seen_base_url or container.settings.public_url:
        return
    host = str(headers.get("host", ""))
    stage = context.get("stage")
    if host.endswith(".amazonaws.com") and ".execute-api." in host and stage:
        container.seen_base_url = f"https://{host}/{stage}"


def caller(request: Request) -> tokens.Identity:
    """The authenticated identity, from the authorizer's context; any token but a
    server's read afresh, past the authorizer's and the container's caches (a stored
    token from the token store, a signed-in person's verified again), so a revoked or
    expired one is refused on every route from the moment it is.

    Raises:
        errors.Unauthorized: a console caller's token that is revoked or expired.
        errors.Forbidden: the authorizer could not verify the token, and it is not valid;
            or the gateway's cached answer outlived the token's expiry.
        ports.StorageError: the token store is unavailable.
    """
    context = request.context.get("authorizer", {})
    if context.get("refused"):
        raise errors.Unauthorized(f"The token is not valid ({context['refused']}).")
    if context.get("unverified"):
        result = deps().authenticator.authenticate(request.headers.get("authorization", ""))
        if result.identity is None:
            if result.told_at_route:
                raise errors.Unauthorized(f"The token is not valid ({result.reason}).")
            raise errors.Forbidden("The token is not valid.")
        identity = result.identity
    else:
        expires = context.get("expires_at_ms")
        if expires is not None and deps().clock() >= int(expires):
            # The gateway kept the authorizer's answer past the token's expiry.
            raise errors.Forbidden("The token is not valid (expired token).")
        identity = tokens.Identity(
            tenant=context["tenant"],
            role=context["role"],
            token_id=context["token_id"],
            name=context.get("name", ""),
            principals=tokens.decode_principals(context.get("principals")),
        )
    if identity.role == tokens.SERVER:
        return identity
    header = request.headers.get("authorization", "")
    fresh = deps().authenticator.authenticate(header, fresh=True)
    if fresh.identity is None:
        raise errors.Unauthorized(f"The token is not valid ({fresh.reason}).")
    return fresh.identity


def caller_may(request: Request, permission: roles.Permission) -> tokens.Identity:
    """The caller (`caller`, read afresh), whose role must hold `permission`
    (chalicelib/auth/roles.py says which role holds which). The role gates below
    (`server_caller` to `manager_and_body`) raise what this raises, and those that read
    a body what `caller_and_body` raises.

    Raises:
        errors.Unauthorized: the token is revoked or expired.
        errors.Forbidden: the role lacks the permission, or the token is not valid.
        ports.StorageError: the token store is unavailable.
    """
    identity = caller(request)
    if not roles.may(identity.role, permission):
        raise errors.Forbidden(roles.refusal(identity.role, permission))
    return identity


def request_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body (size- and syntax-checked)."""
    raw = request.raw_body
    return validation.parse_json_object(raw.encode("utf-8") if isinstance(raw, str) else raw)


def query(request: Request) -> dict[str, str]:
    """The request's query parameters (the last value of a repeated one)."""
    return dict(request.query_params or {})


def caller_and_body(
    request: Request, permission: roles.Permission
) -> tuple[tokens.Identity, dict[str, Any]]:
    """A changing route's caller (`caller_may`) and its JSON body, in that order: a
    refused token is answered before its body is read.

    Raises:
        errors.Unauthorized: the token is revoked, expired or unknown.
        errors.Forbidden: the role lacks the permission.
        ports.StorageError: the token store is unavailable.
        errors.PayloadTooLarge: the body is over the size limit.
        errors.InvalidRequest: the body is missing, not JSON, or not an object.
    """
    who = caller_may(request, permission)
    return who, request_body(request)


def server_caller(request: Request) -> tokens.Identity:
    """A caller that may check: a server or an admin token (CHECK)."""
    return caller_may(request, roles.Permission.CHECK)


def reader(request: Request) -> tokens.Identity:
    """A reading route's caller: any role but a server's (READ)."""
    return caller_may(request, roles.Permission.READ)


def reader_and_query(request: Request) -> tuple[tokens.Identity, dict[str, str]]:
    """A reading route's caller (READ) and its query parameters."""
    return caller_may(request, roles.Permission.READ), query(request)


def operator_and_body(request: Request) -> tuple[tokens.Identity, dict[str, Any]]:
    """A route acting on a session or a principal: an operator or an admin (ACT), and
    the body."""
    return caller_and_body(request, roles.Permission.ACT)


def manager(request: Request) -> tokens.Identity:
    """A route managing tokens or grants: an admin (MANAGE)."""
    return caller_may(request, roles.Permission.MANAGE)


def manager_and_body(request: Request) -> tuple[tokens.Identity, dict[str, Any]]:
    """A route changing tokens or grants: an admin (MANAGE), and the body."""
    return caller_and_body(request, roles.Permission.MANAGE)


def path_session(raw: str) -> str:
    """A session id from the URL path (percent-decoded, validated)."""
    return validation.session_id_param(unquote(raw))


def path_key(who: tokens.Identity, raw: str) -> quota.SessionKey:
    """The caller's tenant's session named in the URL path."""
    return quota.SessionKey(who.tenant, path_session(raw))


def path_principal(who: tokens.Identity, raw: str) -> quota.BudgetKey:
    """The caller's tenant's principal named in the URL path."""
    return quota.BudgetKey.principal(who.tenant, admin_requests.principal_param(unquote(raw)))
