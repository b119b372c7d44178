"""The JSON bodies the API answers with, one TypedDict per schema of openapi.yaml.

The services build these and `responses.json_response` serialises them, the one place
a body becomes JSON; tests/api/test_response_schemas.py checks every answer against
openapi.yaml on each backend. Types only: nothing here runs on a request.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

# -- what MCP servers read -----------------------------------------------------------


class Health(TypedDict):
    status: Literal["ok"]
    service: str


class ScopeUsage(TypedDict):
    used: int
    limit: int
    remaining: int
    window_seconds: int
    resets_at: str


class LeaseView(TypedDict):
    id: str
    granted: int
    expires_at: str
    lease_seconds: int
    lease_max: int


class RefusalError(TypedDict):
    code: str
    scope: str
    message: str
    why: str


class Decision(TypedDict):
    """`Decision`, and with `error` and `retry_after_seconds` a `Refusal`."""

    allowed: bool
    session_id: str
    tool: str
    category: str
    used: int
    limit: int
    remaining: int
    resets_at: str | None
    duplicate: bool
    scopes: NotRequired[dict[str, ScopeUsage]]
    lease: NotRequired[LeaseView]
    shadow: NotRequired[RefusalError]  # shadow mode: what the refusal would have said
    error: NotRequired[RefusalError]
    principal: NotRequired[str]
    retry_after_seconds: NotRequired[int | None]
    hold_ticket: NotRequired[str]  # a refusal's: vouches for the refusals its hold reports
    replay: NotRequired[dict[str, object]]  # a duplicate's stored result (replay categories)
    session_token: NotRequired[str]  # the session the service minted, to echo back (#31)


class ResultKept(TypedDict):
    """`ResultKept`: what `PUT /v1/results/{call_id}` kept."""

    call_id: str
    session_id: str
    tool: str
    stored: str  # "stored" (201) or "same" (200: this result was kept before)
    truncated: bool
    digest: str
    size: int


class ResultRead(TypedDict):
    """`ResultRead`: what `GET /v1/results/{call_id}` found for a copy of the call."""

    call_id: str
    session_id: str
    replay: dict[str, object]  # `Replay`: stored (with the result), running, not_kept


class RuleView(TypedDict, total=False):
    """One policy rule as the MCP side reads it (`GET /v1/policy`)."""

    category: str
    tools: list[str]
    pattern: str
    units_from: str
    approval: bool


class PolicyView(TypedDict):
    """The rules of the policy that the MCP side applies itself (`GET /v1/policy`)."""

    rules: list[RuleView]
    categories: list[str]
    replay: list[str]
    max_age_seconds: int


class LeaseReturned(TypedDict):
    returned: int


# -- sessions ------------------------------------------------------------------------


class CategoryView(TypedDict):
    used: int
    leased: int
    limit: int
    base_limit: int
    raised_limit: int | None
    raised_until: str | None
    remaining: int
    refused: int  # every refusal, those the MCP side held included
    refused_held: int  # of those, the ones the MCP side held (answered without asking)
    state: str


class ClientView(TypedDict):
    name: str | None
    version: str | None
    oauth_client_id: str | None


class SessionView(TypedDict):
    tenant: str
    session_id: str
    state: str
    principal: str | None
    server: str | None
    client: ClientView | None
    first_call_at: str
    last_call_at: str
    started_at: str
    last_seen_at: str
    resets_at: str | None
    suspended_reason: str | None
    categories: dict[str, CategoryView]
    last_calls: list[dict[str, object]]


class TroubleView(TypedDict):
    kind: str
    at: str
    category: str | None


class ListedSession(SessionView):
    listing_state: str
    trouble: TroubleView


class SessionListing(TypedDict):
    sessions: list[ListedSession]
    next: str | None


class SessionChanged(TypedDict):
    session: SessionView


class SessionLimitChanged(SessionChanged):
    category: str
    before: int
    after: int


# -- principals and the tenant -------------------------------------------------------


class WindowView(TypedDict):
    used: int
    limit: int
    base_limit: int
    raised_limit: int | None
    remaining: int
    window_seconds: int
    window_started_at: str
    resets_at: str


class BudgetView(TypedDict):
    tenant: str
    scope: str
    state: Literal["active", "suspended"]
    suspended_reason: str | None
    refusals_in_a_row: int  # the longest of `streaks`
    streaks: dict[str, int]  # a principal's refusals in a row, by category
    suspend_after_refusals: int
    categories: dict[str, WindowView]
    principal: NotRequired[str]


class PrincipalChanged(TypedDict):
    principal: BudgetView


class PrincipalLimitChanged(PrincipalChanged):
    before: int
    after: int


# -- grants, tokens, audit -----------------------------------------------------------


class GrantView(TypedDict):
    grant_id: str
    principal: str
    category: str
    limit: int
    starts_at: str
    ends_at: str
    reason: str
    created_by: str
    created_at: str


class GrantAnswer(TypedDict):
    grant: GrantView


class GrantList(TypedDict):
    grants: list[GrantView]


class TokenView(TypedDict):
    token_id: str
    tenant: str
    role: str
    name: str
    principals: list[str]
    created_at: str
    revoked_at: str | None


class TokenCreated(TokenView):
    token: str


class TokenList(TypedDict):
    tokens: list[TokenView]


class AuditPage(TypedDict):
    events: list[dict[str, Any]]
    next: str | None


class ShadowGroup(TypedDict):
    server: str
    principal: str
    tool: str
    refusals: int
    sessions: int
    categories: list[str]
    scopes: list[str]
    first: str
    last: str


class ShadowView(TypedDict):
    groups: list[ShadowGroup]
    truncated: bool


class SignInConfig(TypedDict):
    issuer: str
    client_id: str
    authorization_endpoint: str
    token_endpoint: str
    scope: str


class ConsoleConfig(TypedDict):
    sign_in: SignInConfig | None


class Caller(TypedDict):
    tenant: str
    role: str
    name: str
    actor: str
    signed_in: bool
    permissions: list[str]


class ApprovalView(TypedDict):
    """An approval of one call (issue 32), as the API, the console and the CLI show it."""

    id: str
    state: str
    principal: str
    tool: str
    args_digest: str
    arguments_preview: str | None
    session_id: str | None
    server: str | None
    created_at: str
    expires_at: str
    decided_by: str | None
    reason: str | None


class ApprovalList(TypedDict):
    approvals: list[ApprovalView]


Body = (
    Health
    | Decision
    | LeaseReturned
    | PolicyView
    | ResultKept
    | ResultRead
    | SessionView
    | SessionListing
    | SessionChanged
    | SessionLimitChanged
    | BudgetView
    | PrincipalChanged
    | PrincipalLimitChanged
    | GrantAnswer
    | GrantList
    | TokenView
    | TokenCreated
    | TokenList
    | AuditPage
    | ShadowView
    | ConsoleConfig
    | Caller
    | ApprovalView
    | ApprovalList
)
"""Every body the JSON routes answer with (errors aside: `errors.QuotaServiceError.body`)."""
