"""The one place an answer takes its HTTP shape: JSON bodies, a check's decision with its
RateLimit headers and Retry-After, the email links' HTML pages, and the mapping from
every error to its response."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from chalice.app import Response

from chalicelib.api.deferred import answers, clock, errors, pages, ports, quota, shadow
from chalicelib.observability import count_fault, logger

if TYPE_CHECKING:
    from chalicelib.api.schemas import Body, Decision, PolicyView, RefusalError, RuleView
    from chalicelib.quota.policy import Policy

Headers = dict[str, str | list[str]]


def json_response(
    body: Body, status: int = 200, headers: Mapping[str, str | list[str]] | None = None
) -> Response:
    """The one place a typed body (chalicelib/api/schemas.py) becomes a JSON answer."""
    return Response(body=body, status_code=status, headers=dict(headers or {}))


POLICY_MAX_AGE_SECONDS = 60
"""How long the MCP side may keep the policy's rules before asking again."""


def policy_view(policy: Policy) -> PolicyView:
    """The rules the MCP side applies itself (`units_from`), with every rule's tools or
    pattern and category so it can tell which rule a tool falls under."""
    rules: list[RuleView] = []
    for rule in policy.rules:
        view: RuleView = {"category": rule.category}
        if rule.tools:
            view["tools"] = sorted(rule.tools)
        if rule.pattern is not None:
            view["pattern"] = rule.pattern
        if rule.units_from is not None:
            view["units_from"] = rule.units_from
        if rule.approval:
            view["approval"] = True
        rules.append(view)
    return {
        "rules": rules,
        "categories": sorted(policy.categories),
        "replay": sorted(name for name, category in policy.categories.items() if category.replay),
        "max_age_seconds": POLICY_MAX_AGE_SECONDS,
    }


def error_response(exc: errors.QuotaServiceError) -> Response:
    """The one mapping from a service error to its HTTP response."""
    headers: Headers = dict(exc.headers())
    return Response(body=exc.body(), status_code=exc.STATUS_CODE, headers=headers)


def handled(view: Callable[..., Response]) -> Callable[..., Response]:
    """Turn service errors into their responses, and anything else into a plain 500."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Response:
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
            count_fault()
            return error_response(errors.QuotaServiceError("Internal error; it has been logged."))

    return wrapper


def html_response(page: pages.Page) -> Response:
    """An HTML page with the headers that keep a token-bearing URL private."""
    return Response(body=page.html, status_code=page.status, headers=dict(pages.HEADERS))


def rate_limit_headers(decision: answers.Decision) -> Headers:
    """One RateLimit-Policy / RateLimit entry per scope that applies, the session's first
    (named after the category), then `<category>-principal` and `<category>-tenant`."""
    window = max(1, (decision.resets_at_ms - decision.now_ms) // 1000)
    session_remaining = decision.remaining
    if isinstance(decision, answers.Refused) and decision.scope is not quota.Scope.SESSION:
        session_remaining = 0  # refused: no headroom, whichever budget said no
    policies = [f'"{decision.category}";q={decision.limit};w={window}']
    remaining = [f'"{decision.category}";r={session_remaining};t={window}']
    if isinstance(decision, answers.Refused) and decision.scope is not quota.Scope.SESSION:
        policies, remaining = [], []
    for use in decision.scopes:
        name = f"{decision.category}-{use.scope.value}"
        reset = max(1, -(-(use.resets_at_ms - decision.now_ms) // 1000))
        policies.append(f'"{name}";q={use.limit};w={use.window_seconds}')
        left = (
            0
            if isinstance(decision, answers.Refused) and use.scope is decision.scope
            else use.remaining
        )
        remaining.append(f'"{name}";r={left};t={reset}')
    return {"RateLimit-Policy": ", ".join(policies), "RateLimit": ", ".join(remaining)}


def refusal_error(refusal: answers.Refused, message: str) -> RefusalError:
    """The one shape of a refusal in an answer: a refused check's `error`, and an allowed
    one's `shadow` (what shadow mode's refusal would have said, in `message`)."""
    return {
        "code": str(refusal.reason),
        "scope": str(refusal.scope),
        "message": message,
        "why": refusal.why,
    }


def decision_response(
    decision: answers.Decision,
    replay: dict[str, object] | None = None,
    session_token: str | None = None,
) -> Response:
    """200 for an allowed call (with a duplicate's `replay`, when its category replays);
    429 with Retry-After and an explicit message for a refusal. Either carries the
    `session_token` the service minted for the call's session, if any."""
    body: Decision = {
        "allowed": decision.allowed,
        "session_id": decision.session_id,
        "tool": decision.tool,
        "category": decision.category,
        "used": decision.used,
        "limit": decision.limit,
        "remaining": decision.remaining,
        "resets_at": clock.iso_utc(decision.resets_at_ms),
        "duplicate": not isinstance(decision, answers.Refused) and decision.duplicate,
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
    if session_token is not None:
        body["session_token"] = session_token
    headers = rate_limit_headers(decision)
    if not isinstance(decision, answers.Refused):
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
            body["shadow"] = refusal_error(decision.shadow, shadow.shadow_message(decision.shadow))
        if replay is not None:
            body["replay"] = replay
        return json_response(body, 200, headers)
    body["error"] = refusal_error(decision, decision.message)
    if decision.principal is not None:
        body["principal"] = decision.principal
    if decision.hold_ticket is not None:
        body["hold_ticket"] = decision.hold_ticket
    # Waiting does not help a suspended session: only an administrator's resume does.
    body["retry_after_seconds"] = None if decision.suspended else decision.retry_after_seconds
    if decision.suspended:
        body["resets_at"] = None
    else:
        headers["Retry-After"] = str(decision.retry_after_seconds)
    return json_response(body, 429, headers)
