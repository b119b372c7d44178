"""What the check route does around the check service: bind the request to the
principals its token may act for, count the calls a client ran uncounted (fail-open),
and count and log a refusal. An allowed check writes no metric and no log line."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from chalicelib.auth.tokens import Identity, effective_principal
from chalicelib.check.requests import CheckRequest
from chalicelib.observability import count, logger
from chalicelib.quota.answers import Decision, Refused

if TYPE_CHECKING:
    from chalicelib.check.service import CheckService


def bind_principal(identity: Identity, request: CheckRequest) -> CheckRequest:
    """The request with the principal it counts as: grants, budgets and the stored
    session see only a principal the token may act for.

    Raises:
        errors.PrincipalNotAllowed: the claimed principal is not the token's.
    """
    return replace(request, principal=effective_principal(identity, request.principal))


def count_fail_open(request: CheckRequest) -> None:
    """Count the calls a client ran uncounted while it could not reach us (alarmed on).
    The refusals it answered itself are counted where their hold ticket is redeemed
    (`check/tickets.py`): only those the service vouched for count as refusals."""
    for category, uncounted in (request.fail_open or {}).items():
        if uncounted:
            count("ClientFailOpen", category, uncounted)


def report_refusal(tenant: str, decision: Refused) -> None:
    """Count a refusal by category and log it."""
    count("ChecksBlocked", decision.category)
    logger.warning(
        "tool call refused",
        extra={
            "tenant": tenant,
            "session_id": decision.session_id,
            "tool": decision.tool,
            "category": decision.category,
            "reason": str(decision.reason),
            "used": decision.used,
            "limit": decision.limit,
        },
    )


def check_as(identity: Identity, request: CheckRequest, checks: CheckService) -> Decision:
    """Check one call for the token's identity: bound, reported, counted.

    Raises:
        errors.PrincipalNotAllowed: the claimed principal is not the token's.
        StorageError: a store failed (the check service's faults).
    """
    bound = bind_principal(identity, request)
    count_fail_open(bound)
    decision = checks.check(identity.tenant, bound)
    # An allowed check writes no metric and no log line: it never loads Powertools (a
    # shorter cold start, and no CloudWatch Logs line per call). API Gateway's Count and
    # Lambda's Invocations give the volume; refusals are counted by category.
    if isinstance(decision, Refused):
        report_refusal(identity.tenant, decision)
    return decision


def copy_as(identity: Identity, request: CheckRequest, checks: CheckService) -> Decision | None:
    """`CheckService.answer_copy` for the token's identity (bound and reported as
    `check_as`): the answer to a copy of a call already admitted, or None.

    Raises:
        errors.PrincipalNotAllowed: the claimed principal is not the token's.
        CallIdConflict, CallInProgress: as `CheckService.answer_copy`.
        StorageError: a store failed.
    """
    bound = bind_principal(identity, request)
    decision = checks.answer_copy(identity.tenant, bound)
    if decision is not None:
        count_fail_open(bound)
    return decision
