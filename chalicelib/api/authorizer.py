"""The built-in authorizer: which routes a bearer token may call. Its own Lambda
function imports this module alone (handler `chalicelib.api.authorizer.bearer`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalice.app import AuthRequest, AuthResponse, AuthRoute, Blueprint

from chalicelib.api.context import deps
from chalicelib.lazy import lazy_module
from chalicelib.observability import logger

if TYPE_CHECKING:
    from chalicelib.auth import tokens
    from chalicelib.storage import ports
else:
    ports = lazy_module("chalicelib.storage.ports")
    tokens = lazy_module("chalicelib.auth.tokens")

authorizers = Blueprint(__name__)

SERVER_ROUTES = [AuthRoute("/v1/check", ["POST"]), AuthRoute("/v1/leases/return", ["POST"])]


# API Gateway keeps the answer this long: auth.AUTHORIZER_TTL_SECONDS (with the container's
# token cache, a revocation stops a server token's checks within 60 s). Its cache never
# outlives a console caller's revocation or expiry: every route looks any token but a
# server's up afresh (`context.caller`), so an "allow" kept from before meets a 401.
@authorizers.authorizer(ttl_seconds=30)
def bearer(auth_request: AuthRequest) -> AuthResponse:
    """Server tokens may check; every other role reaches the admin routes, which check
    its permission themselves (`context.caller_may`)."""
    try:
        result = deps().authenticator.authenticate(auth_request.token or "")
    except ports.StorageError as exc:
        # The token store (or the identity provider's keys) is down. Let the request
        # through unverified: every route authenticates again itself (`context.caller`),
        # and answers 503 with Retry-After if it is still down, instead of the gateway's
        # bare 500.
        logger.warning("token store unavailable in the authorizer", extra={"error": exc.doing})
        return AuthResponse(routes=["*"], principal_id="unverified", context={"unverified": "1"})
    identity = result.identity
    if identity is None:
        logger.info("token refused", extra={"reason": result.reason})
        if result.told_at_route:
            # A console caller's real token, revoked or expired (or signed in with claims
            # this service refuses): the route answers 401 itself, as it does while the
            # gateway still holds this token's earlier "allow" (this answer is cached the
            # same way, and lets nothing through: `context.caller` refuses it).
            return AuthResponse(
                routes=["*"], principal_id="refused", context={"refused": result.reason}
            )
        return AuthResponse(routes=[], principal_id="anonymous")
    server = identity.role == tokens.SERVER
    routes: list[str | AuthRoute] = list(SERVER_ROUTES) if server else ["*"]
    context = {
        "tenant": identity.tenant,
        "role": identity.role,
        "token_id": identity.token_id,
        "name": identity.name,
        "principals": tokens.encode_principals(identity.principals),  # context values are strings
    }
    return AuthResponse(routes=routes, principal_id=identity.token_id, context=context)
