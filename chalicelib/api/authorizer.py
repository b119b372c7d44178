"""The built-in authorizer: which routes a bearer token may call. Its own Lambda
function imports this module alone (handler `chalicelib.api.authorizer.bearer`)."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from chalice.app import AuthRequest, AuthResponse, AuthRoute, Blueprint

from chalicelib.api.context import deps
from chalicelib.api.deferred import auth, ports, roles, tokens
from chalicelib.observability import logger

authorizers = Blueprint(__name__)


@cache
def server_routes() -> tuple[AuthRoute, ...]:
    """What a server token reaches (`roles.SERVER_ROUTES`), a path parameter as `*`."""
    return tuple(
        AuthRoute(re.sub(r"\{[^}]+\}", "*", path), [method])
        for method, path in (route.split(" ", 1) for route in roles.SERVER_ROUTES)
    )


class MeteredAuthResponse(AuthResponse):
    """An allow that names the usage-plan key API Gateway meters the request under (the
    tenant's own limit; `apiKeySource: AUTHORIZER` in the packaged stack)."""

    def __init__(self, *args: Any, usage_key: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.usage_key = usage_key

    def to_dict(self, request: AuthRequest) -> dict[str, Any]:
        answer = super().to_dict(request)
        if self.usage_key is not None:
            answer["usageIdentifierKey"] = self.usage_key
        return answer


def _usage_key(tenant: str | None) -> str | None:
    """The usage-plan key of `tenant` (None: unattributed) where the stack meters tenants."""
    scope = deps().settings.usage_key_scope
    return auth.usage_key(scope, tenant) if scope else None


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
        return MeteredAuthResponse(
            routes=["*"],
            principal_id="unverified",
            context={"unverified": "1"},
            usage_key=_usage_key(None),
        )
    identity = result.identity
    if identity is None:
        logger.info("token refused", extra={"reason": result.reason})
        if result.told_at_route:
            # A console caller's real token, revoked or expired (or signed in with claims
            # this service refuses): the route answers 401 itself, as it does while the
            # gateway still holds this token's earlier "allow" (this answer is cached the
            # same way, and lets nothing through: `context.caller` refuses it).
            return MeteredAuthResponse(
                routes=["*"],
                principal_id="refused",
                context={"refused": result.reason},
                usage_key=_usage_key(None),
            )
        return AuthResponse(routes=[], principal_id="anonymous")
    server = identity.role == tokens.SERVER
    routes: list[str | AuthRoute] = list(server_routes()) if server else ["*"]
    context = {
        "tenant": identity.tenant,
        "role": identity.role,
        "token_id": identity.token_id,
        "name": identity.name,
        "principals": tokens.encode_principals(identity.principals),  # context values are strings
    }
    if result.expires_at_ms is not None:
        # The gateway keeps this answer AUTHORIZER_TTL_SECONDS: the route refuses it
        # past the token's expiry (`context.caller`).
        context["expires_at_ms"] = str(result.expires_at_ms)
    return MeteredAuthResponse(
        routes=routes,
        principal_id=identity.token_id,
        context=context,
        usage_key=_usage_key(identity.tenant),
    )
