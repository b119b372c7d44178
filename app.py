"""mcp-quota HTTP API: routes, the bearer-token authorizer, wiring, and the one mapping
from errors and decisions to HTTP responses. Logic lives in chalicelib/."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from chalice.app import AuthRequest, AuthResponse, AuthRoute, Chalice, Response, SQSEvent

from chalicelib.lazy import lazy_module
from chalicelib.observability import count, logger

if TYPE_CHECKING:
    from chalicelib import clock, console_files, errors, notify, wiring
    from chalicelib.admin import requests as admin_requests
    from chalicelib.auth import tokens
    from chalicelib.check import requests as validation
    from chalicelib.check import shadow
    from chalicelib.links import pages
    from chalicelib.links.actions import LinkDesk
    from chalicelib.quota import core as quota
    from chalicelib.storage import ports
else:
    # Loaded on first use: the init phase imports Chalice and little of ours, and a
    # check never loads the admin side (bench/cold_start.py).
    admin_requests = lazy_module("chalicelib.admin.requests")
    clock = lazy_module("chalicelib.clock")
    console_files = lazy_module("chalicelib.console_files")
    errors = lazy_module("chalicelib.errors")
    notify = lazy_module("chalicelib.notify")
    pages = lazy_module("chalicelib.links.pages")
    ports = lazy_module("chalicelib.storage.ports")
    quota = lazy_module("chalicelib.quota.core")
    tokens = lazy_module("chalicelib.auth.tokens")
    validation = lazy_module("chalicelib.check.requests")
    shadow = lazy_module("chalicelib.check.shadow")
    wiring = lazy_module("chalicelib.wiring")

app = Chalice(app_name="mcp-quota")
app.debug = False  # never a stack trace in a response, in any stage

_container: wiring.Container | None = None


def deps() -> wiring.Container:
    """The per-container dependencies, built on first use."""
    global _container
    if _container is None:
        _container = wiring.Container()
    return _container


def reset_dependencies(container: wiring.Container | None = None) -> None:
    """Replace the dependencies (tests: a fixed clock, settings, or a fresh moto)."""
    global _container
    _container = container


SERVER_ROUTES = [AuthRoute("/v1/check", ["POST"]), AuthRoute("/v1/leases/return", ["POST"])]


# API Gateway keeps the answer this long: auth.AUTHORIZER_TTL_SECONDS (with the container's
# token cache, a revocation stops checks within 60 s; changing routes check afresh).
@app.authorizer(ttl_seconds=30)
def bearer(auth_request: AuthRequest) -> AuthResponse:
    """Built-in authorizer: server tokens may check; admin tokens may do everything."""
    try:
        result = deps().authenticator.authenticate(auth_request.token or "")
    except ports.StorageError as exc:
        # The token store is down. Let the request through unverified: every route
        # authenticates again itself (`caller`), and answers 503 with Retry-After if the
        # store is still down, instead of the gateway's bare 500.
        logger.warning("token store unavailable in the authorizer", extra={"error": exc.doing})
        return AuthResponse(routes=["*"], principal_id="unverified", context={"unverified": "1"})
    identity = result.identity
    if identity is None:
        logger.info("token refused", extra={"reason": result.reason})
        return AuthResponse(routes=[], principal_id="anonymous")
    routes: list[str | AuthRoute] = ["*"] if identity.role == tokens.ADMIN else list(SERVER_ROUTES)
    context = {
        "tenant": identity.tenant,
        "role": identity.role,
        "token_id": identity.token_id,
        "name": identity.name,
        "principals": tokens.encode_principals(identity.principals),  # context values are strings
    }
    return AuthResponse(routes=routes, principal_id=identity.token_id, context=context)


def error_response(exc: errors.QuotaServiceError) -> Response:
    """The one mapping from a service error to its HTTP response."""
    headers: dict[str, str | list[str]] = dict(exc.headers())
    return Response(body=exc.body(), status_code=exc.STATUS_CODE, headers=headers)


def handled(view: Callable[..., Response]) -> Callable[..., Response]:
    """Turn service errors into their responses, and anything else into a plain 500."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Response:
        request = app.current_request
        if request is not None:
            logger.set_correlation_id(request.context.get("requestId"))
            _learn_base_url(request.headers, request.context)
        try:
            return view(*args, **kwargs)
        except ports.StorageError as exc:
            error = errors.from_storage(exc)
            logger.warning("store failed", extra={"code": error.CODE, "error": error.message})
            return error_response(error)
        except errors.QuotaServiceError as exc:
            if exc.STATUS_CODE >= 500:
                logger.warning("request failed", extra={"code": exc.CODE, "error": exc.message})
            return error_response(exc)
        except Exception:
            logger.exception("unhandled error")
            return error_response(errors.QuotaServiceError("Internal error; it has been logged."))

    return wrapper


def _learn_base_url(headers: Any, context: dict[str, Any]) -> None:
    """The API's base URL as API Gateway serves it, for the email's links when no
    QUOTA_PUBLIC_URL is set: only its own execute-api host name is trusted."""
    container = deps()
    if container.seen_base_url or container.settings.public_url:
        return
    host = str(headers.get("host", ""))
    stage = context.get("stage")
    if host.endswith(".amazonaws.com") and ".execute-api." in host and stage:
        container.seen_base_url = f"https://{host}/{stage}"


def caller() -> tokens.Identity:
    """The authenticated identity, from the authorizer's context.

    Raises:
        errors.Forbidden: the authorizer could not verify the token, and it is not valid.
        ports.StorageError: the token store is still unavailable.
    """
    request = app.current_request
    assert request is not None
    context = request.context.get("authorizer", {})
    if context.get("unverified"):
        result = deps().authenticator.authenticate(request.headers.get("authorization", ""))
        if result.identity is None:
            raise errors.Forbidden("The token is not valid.")
        return result.identity
    return tokens.Identity(
        tenant=context["tenant"],
        role=context["role"],
        token_id=context["token_id"],
        name=context.get("name", ""),
        principals=tokens.decode_principals(context.get("principals")),
    )


def admin_caller() -> tokens.Identity:
    """The authenticated identity, which must hold the admin role.

    Raises:
        errors.Forbidden: the token is not an admin token.
    """
    identity = caller()
    if identity.role != tokens.ADMIN:
        raise errors.Forbidden("This endpoint needs an admin token.")
    return identity


def admin_writer() -> tokens.Identity:
    """The admin identity of a route that changes something, read from the token store
    now, past the authorizer's and the container's caches: a revoked or expired admin
    token changes nothing, from the moment it is revoked.

    Raises:
        errors.Unauthorized: the token is revoked, expired or unknown.
        errors.Forbidden: the token is not an admin token.
        ports.StorageError: the token store is unavailable.
    """
    admin_caller()
    request = app.current_request
    assert request is not None
    header = request.headers.get("authorization", "")
    result = deps().authenticator.authenticate(header, fresh=True)
    if result.identity is None:
        raise errors.Unauthorized(f"The token is not valid ({result.reason}).")
    if result.identity.role != tokens.ADMIN:
        raise errors.Forbidden("This endpoint needs an admin token.")
    return result.identity


def path_session(raw: str) -> str:
    """A session id from the URL path (percent-decoded, validated)."""
    return validation.session_id_param(unquote(raw))


def path_key(who: tokens.Identity, raw: str) -> quota.SessionKey:
    """The caller's tenant's session named in the URL path."""
    return quota.SessionKey(who.tenant, path_session(raw))


def request_body() -> dict[str, Any]:
    """The request's JSON object body (size- and syntax-checked)."""
    request = app.current_request
    assert request is not None
    raw = request.raw_body
    return validation.parse_json_object(raw.encode("utf-8") if isinstance(raw, str) else raw)


def _rate_limit_headers(decision: quota.Decision) -> dict[str, str | list[str]]:
    """One RateLimit-Policy / RateLimit entry per scope that applies, the session's first
    (named after the category), then `<category>-principal` and `<category>-tenant`."""
    window = max(1, (decision.resets_at_ms - decision.now_ms) // 1000)
    session_remaining = decision.remaining
    if isinstance(decision, quota.Refused) and decision.scope is not quota.Scope.SESSION:
        session_remaining = 0  # refused: no headroom, whichever budget said no
    policies = [f'"{decision.category}";q={decision.limit};w={window}']
    remaining = [f'"{decision.category}";r={session_remaining};t={window}']
    if isinstance(decision, quota.Refused) and decision.scope is not quota.Scope.SESSION:
        policies, remaining = [], []
    for use in decision.scopes:
        name = f"{decision.category}-{use.scope.value}"
        reset = max(1, -(-(use.resets_at_ms - decision.now_ms) // 1000))
        policies.append(f'"{name}";q={use.limit};w={use.window_seconds}')
        left = (
            0
            if isinstance(decision, quota.Refused) and use.scope is decision.scope
            else use.remaining
        )
        remaining.append(f'"{name}";r={left};t={reset}')
    return {"RateLimit-Policy": ", ".join(policies), "RateLimit": ", ".join(remaining)}


def decision_response(decision: quota.Decision) -> Response:
    """200 for an allowed call; 429 with Retry-After and an explicit message for a refusal."""
    body: dict[str, Any] = {
        "allowed": decision.allowed,
        "session_id": decision.session_id,
        "tool": decision.tool,
        "category": decision.category,
        "used": decision.used,
        "limit": decision.limit,
        "remaining": decision.remaining,
        "resets_at": clock.iso_utc(decision.resets_at_ms),
        "duplicate": not isinstance(decision, quota.Refused) and decision.duplicate,
    }
    if decision.scopes:
        body["scopes"] = {
            use.scope.value: {
                "used": use.used,
                "limit": use.limit,
                "remaining": use.remaining,
                "window_seconds": use.window_seconds,
                "resets_at": clock.iso_utc(use.resets_at_ms),
            }
            for use in decision.scopes
        }
    headers = _rate_limit_headers(decision)
    if not isinstance(decision, quota.Refused):
        if decision.lease is not None:
            lease = decision.lease
            body["lease"] = {
                "id": lease.lease_id,
                "granted": lease.granted,
                "expires_at": clock.iso_utc(lease.expires_at_ms),
                "lease_seconds": lease.lease_seconds,
                "lease_max": lease.lease_max,
            }
        if decision.shadow is not None:
            body["shadow"] = shadow.shadow_json(decision.shadow)
        return Response(body=body, status_code=200, headers=headers)
    body["error"] = {
        "code": str(decision.reason),
        "scope": str(decision.scope),
        "message": decision.message,
    }
    if decision.principal is not None:
        body["principal"] = decision.principal
    if decision.suspended:
        # Waiting does not help: only an administrator's resume does.
        body["resets_at"] = None
        body["retry_after_seconds"] = None
        return Response(body=body, status_code=429, headers=headers)
    body["retry_after_seconds"] = decision.retry_after_seconds
    headers["Retry-After"] = str(decision.retry_after_seconds)
    return Response(body=body, status_code=429, headers=headers)


@app.route("/health", methods=["GET"])
@handled
def health() -> Response:
    """Liveness: no token, no store access."""
    return Response(body={"status": "ok", "service": "mcp-quota"}, status_code=200)


@app.route("/v1/check", methods=["POST"], authorizer=bearer)
@handled
def check() -> Response:
    """Count one tool call against its session's budget, or refuse it."""
    identity = caller()
    if identity.role not in (tokens.SERVER, tokens.ADMIN):
        raise errors.QuotaServiceError("Unknown role.")
    container = deps()
    request = validation.parse_check(request_body(), container.policy)
    # Grants, budgets and the stored session see only a principal the token may act for.
    request = replace(request, principal=tokens.effective_principal(identity, request.principal))
    for category, uncounted in (request.fail_open or {}).items():
        if uncounted:
            # Calls a client ran uncounted while it could not reach us: alarmed on.
            count("ClientFailOpen", category, uncounted)
    for category, held in (request.refused_locally or {}).items():
        if held:  # refusals the client answered itself, during a refusal's hold
            count("ChecksBlocked", category, held)
            count("RefusedLocally", category, held)
    decision = container.checks.check(identity.tenant, request)
    # An allowed check writes no metric and no log line: it never loads Powertools (a
    # shorter cold start, and no CloudWatch Logs line per call). API Gateway's Count and
    # Lambda's Invocations give the volume; refusals are counted by category.
    if isinstance(decision, quota.Refused):
        count("ChecksBlocked", decision.category)
        logger.warning(
            "tool call refused",
            extra={
                "tenant": identity.tenant,
                "session_id": decision.session_id,
                "tool": decision.tool,
                "category": decision.category,
                "reason": str(decision.reason),
                "used": decision.used,
                "limit": decision.limit,
            },
        )
    return decision_response(decision)


@app.route("/v1/leases/return", methods=["POST"], authorizer=bearer)
@handled
def return_lease() -> Response:
    """Give back the calls of a lease the client did not spend; best effort, once."""
    identity = caller()
    if identity.role not in (tokens.SERVER, tokens.ADMIN):
        raise errors.QuotaServiceError("Unknown role.")
    request = validation.parse_lease_return(request_body())
    returned = deps().checks.return_lease(identity.tenant, request)
    return Response(body={"returned": returned}, status_code=200)


# -- administrator endpoints (admin tokens only; tenant from the token) ---------------


@app.route("/v1/sessions/{session_id}", methods=["GET"], authorizer=bearer)
@handled
def show_session(session_id: str) -> Response:
    """A session's counters, limits, state and last calls."""
    who = admin_caller()
    return Response(body=deps().admin.show(path_key(who, session_id)), status_code=200)


@app.route("/v1/sessions/{session_id}/raise", methods=["POST"], authorizer=bearer)
@handled
def raise_session(session_id: str) -> Response:
    """Raise one category's limit for this session, at once."""
    who = admin_writer()
    request = admin_requests.parse_raise(request_body(), deps().policy)
    result = deps().admin.raise_limit(who, path_session(session_id), request)
    return Response(body=result, status_code=200)


@app.route("/v1/sessions", methods=["GET"], authorizer=bearer)
@handled
def list_sessions() -> Response:
    """The sessions blocked or suspended since a time (default: the last 24 h)."""
    request = app.current_request
    assert request is not None
    who = admin_caller()
    container = deps()
    query = admin_requests.parse_sessions_query(dict(request.query_params or {}), container.clock())
    return Response(body=container.admin.list_sessions(who, query), status_code=200)


@app.route("/v1/sessions/{session_id}/lower", methods=["POST"], authorizer=bearer)
@handled
def lower_session(session_id: str) -> Response:
    """Bring a raised limit back down to the base."""
    who = admin_writer()
    request = admin_requests.parse_lower(request_body(), deps().policy)
    result = deps().admin.lower(who, path_session(session_id), request)
    return Response(body=result, status_code=200)


@app.route("/v1/sessions/{session_id}/suspend", methods=["POST"], authorizer=bearer)
@handled
def suspend_session(session_id: str) -> Response:
    """Kill switch: refuse every check of this session until resumed."""
    who = admin_writer()
    result = deps().admin.suspend(
        who, path_session(session_id), admin_requests.parse_reason(request_body())
    )
    return Response(body=result, status_code=200)


@app.route("/v1/sessions/{session_id}/resume", methods=["POST"], authorizer=bearer)
@handled
def resume_session(session_id: str) -> Response:
    """Lift a suspension."""
    who = admin_writer()
    result = deps().admin.resume(
        who, path_session(session_id), admin_requests.parse_reason(request_body())
    )
    return Response(body=result, status_code=200)


@app.route("/v1/sessions/{session_id}/reset", methods=["POST"], authorizer=bearer)
@handled
def reset_session(session_id: str) -> Response:
    """Zero this session's counters."""
    who = admin_writer()
    result = deps().admin.reset(
        who, path_session(session_id), admin_requests.parse_reason(request_body())
    )
    return Response(body=result, status_code=200)


def path_principal(who: tokens.Identity, raw: str) -> quota.BudgetKey:
    """The caller's tenant's principal named in the URL path."""
    return quota.BudgetKey.principal(who.tenant, admin_requests.principal_param(unquote(raw)))


@app.route("/v1/principals/{principal}", methods=["GET"], authorizer=bearer)
@handled
def show_principal(principal: str) -> Response:
    """A principal's windowed counters, limits and state, in every session."""
    who = admin_caller()
    body = deps().budget_admin.show(path_principal(who, principal))
    return Response(body=body, status_code=200)


@app.route("/v1/principals/{principal}/raise", methods=["POST"], authorizer=bearer)
@handled
def raise_principal(principal: str) -> Response:
    """Raise one category's principal budget."""
    who = admin_writer()
    request = admin_requests.parse_raise(request_body(), deps().policy)
    body = deps().budget_admin.raise_limit(who, path_principal(who, principal), request)
    return Response(body=body, status_code=200)


@app.route("/v1/principals/{principal}/suspend", methods=["POST"], authorizer=bearer)
@handled
def suspend_principal(principal: str) -> Response:
    """Refuse every call made for this principal, in every session."""
    who = admin_writer()
    reason = admin_requests.parse_reason(request_body())
    body = deps().budget_admin.suspend(who, path_principal(who, principal), reason)
    return Response(body=body, status_code=200)


@app.route("/v1/principals/{principal}/resume", methods=["POST"], authorizer=bearer)
@handled
def resume_principal(principal: str) -> Response:
    """Lift a principal's suspension, manual or automatic."""
    who = admin_writer()
    reason = admin_requests.parse_reason(request_body())
    body = deps().budget_admin.resume(who, path_principal(who, principal), reason)
    return Response(body=body, status_code=200)


@app.route("/v1/principals/{principal}/reset", methods=["POST"], authorizer=bearer)
@handled
def reset_principal(principal: str) -> Response:
    """Zero a principal's counters in every window."""
    who = admin_writer()
    reason = admin_requests.parse_reason(request_body())
    body = deps().budget_admin.reset(who, path_principal(who, principal), reason)
    return Response(body=body, status_code=200)


@app.route("/v1/tenant", methods=["GET"], authorizer=bearer)
@handled
def show_tenant() -> Response:
    """The tenant's ceiling: counters, limits and windows."""
    who = admin_caller()
    body = deps().budget_admin.show(quota.BudgetKey.whole_tenant(who.tenant))
    return Response(body=body, status_code=200)


@app.route("/v1/grants", methods=["POST"], authorizer=bearer)
@handled
def add_grant() -> Response:
    """Plan a raise for a principal in a time window."""
    who = admin_writer()
    container = deps()
    request = admin_requests.parse_grant(request_body(), container.policy, container.clock())
    return Response(body=container.admin.add_grant(who, request), status_code=201)


@app.route("/v1/grants", methods=["GET"], authorizer=bearer)
@handled
def list_grants() -> Response:
    """The tenant's grants."""
    return Response(body=deps().admin.list_grants(admin_caller()), status_code=200)


@app.route("/v1/grants/{grant_id}", methods=["DELETE"], authorizer=bearer)
@handled
def delete_grant(grant_id: str) -> Response:
    """Delete a grant."""
    who = admin_writer()
    return Response(
        body=deps().admin.delete_grant(who, admin_requests.grant_id_param(grant_id)),
        status_code=200,
    )


@app.route("/v1/tokens", methods=["POST"], authorizer=bearer)
@handled
def create_token() -> Response:
    """A new token of the caller's tenant; the token itself is in this answer only."""
    who = admin_writer()
    request = admin_requests.parse_token(request_body())
    body = deps().token_admin.create(who, request)
    return Response(body=body, status_code=201, headers={"Cache-Control": "no-store"})


@app.route("/v1/tokens", methods=["GET"], authorizer=bearer)
@handled
def list_tokens() -> Response:
    """The tenant's tokens, without secrets."""
    return Response(body=deps().token_admin.list(admin_caller()), status_code=200)


@app.route("/v1/tokens/{token_id}", methods=["DELETE"], authorizer=bearer)
@handled
def revoke_token(token_id: str) -> Response:
    """Revoke one of the tenant's tokens (again is harmless)."""
    who = admin_writer()
    body = deps().token_admin.revoke(who, admin_requests.token_id_param(token_id))
    return Response(body=body, status_code=200)


@app.route("/v1/audit", methods=["GET"], authorizer=bearer)
@handled
def audit_trail() -> Response:
    """A page of the audit trail."""
    request = app.current_request
    assert request is not None
    who = admin_caller()
    query = admin_requests.parse_audit_query(dict(request.query_params or {}))
    return Response(body=deps().admin.audit_page(who, query), status_code=200)


@app.route("/v1/shadow", methods=["GET"], authorizer=bearer)
@handled
def shadow_refusals() -> Response:
    """What shadow mode would have refused, by server, principal and tool."""
    request = app.current_request
    assert request is not None
    query = admin_requests.parse_audit_query(dict(request.query_params or {}))
    return Response(body=deps().admin.shadow_view(admin_caller(), query.since_ms), status_code=200)


# -- one-click links of the email, and the console (HTML; no token in either URL) ------

LINK_CONTENT_TYPES = ["application/x-www-form-urlencoded", "multipart/form-data", "text/plain"]


def html_response(page: pages.Page) -> Response:
    """An HTML page with the headers that keep a token-bearing URL private."""
    return Response(body=page.html, status_code=page.status, headers=dict(pages.HEADERS))


def _link_desk() -> LinkDesk:
    """Raises: errors.NotFound: links are not set up in this deployment."""
    desk = deps().link_desk()
    if desk is None:
        raise errors.NotFound("One-click links are not set up in this deployment.")
    return desk


@app.route("/actions/{token}", methods=["GET"])
@handled
def confirm_link(token: str) -> Response:
    """The confirmation page of an emailed action: changes nothing."""
    return html_response(_link_desk().confirm(unquote(token)))


@app.route("/actions/{token}", methods=["POST"], content_types=LINK_CONTENT_TYPES)
@handled
def perform_link(token: str) -> Response:
    """Perform an emailed action, once."""
    return html_response(_link_desk().perform(unquote(token)))


@app.route("/console", methods=["GET", "HEAD"])
@handled
def console_page() -> Response:
    """The web console's page; `/console/` redirects here so its relative links work."""
    request = app.current_request
    assert request is not None
    if console_files.trailing_slash(str(request.context.get("path", ""))):
        return Response(body="", status_code=308, headers={"Location": "../console"})
    return console_response("index.html")


@app.route("/console/{name}", methods=["GET", "HEAD"])
@handled
def console_asset(name: str) -> Response:
    """The console's script, style sheet and icon."""
    return console_response(name)


@app.route("/favicon.ico", methods=["GET", "HEAD"])
def favicon() -> Response:
    """No icon at the root (the console links its own): 204 instead of a 404 in the log."""
    return Response(body="", status_code=204, headers={"Cache-Control": "max-age=86400"})


def console_response(name: str) -> Response:
    """Raises: errors.NotFound: no such console file."""
    found = console_files.console_file(name)
    if found is None:
        raise errors.NotFound(f"No console file {name[:40]!r}.")
    body, content_type = found
    return Response(body=body, status_code=200, headers=console_files.console_headers(content_type))


# -- the notifier function: refusals' emails, off the request path -----------------------

# The queue's name as `chalice package` writes it; the merge template points the event
# source at the stack's own queue (deploy/build_template.py).
NOTIFY_QUEUE = "mcp-quota-notifications"


@app.on_sqs_message(queue=NOTIFY_QUEUE, batch_size=10, name="notifier")
def notifier(event: SQSEvent) -> dict[str, Any]:
    """Publish queued emails to SNS; SQS delivers the failed ones again, then keeps them
    in the dead-letter queue (partial batch answer: the sent ones are not repeated)."""
    messages = ((record.to_dict()["messageId"], record.body) for record in event)
    delivered = notify.deliver(messages, deps().sns_notifier)
    for category in delivered.failed_categories:
        count("NotificationFailed", category or None)
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in delivered.failed]}
