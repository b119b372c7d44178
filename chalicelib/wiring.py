"""Builds the service's dependencies once per container, lazily, so that importing the
app costs little and tests can start moto (or point at dynalite) before anything connects.

`QUOTA_BACKEND=memory` puts every port in this process's memory instead of DynamoDB.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from chalicelib import aws
from chalicelib.admin.grants import GrantLimits
from chalicelib.aws import CLIENT_CONFIG, TOKEN_CLIENT_CONFIG
from chalicelib.check.afterwards import Afterwards
from chalicelib.check.escalation import PrincipalGate
from chalicelib.check.service import CheckService
from chalicelib.clock import Clock, system_clock
from chalicelib.errors import Misconfigured
from chalicelib.observability import count, logger
from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import Policy, load_policy
from chalicelib.settings import Settings
from chalicelib.storage import dynamodb, memory
from chalicelib.storage.ports import (
    AuditLog,
    BudgetCounters,
    GrantRepository,
    LinkUses,
    SessionCounters,
    Stores,
    TokenRepository,
    TroubleIndex,
    TroubleMark,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient

    from chalicelib.admin.actions import AdminService
    from chalicelib.admin.budgets import BudgetAdmin
    from chalicelib.admin.tokens import TokenAdmin
    from chalicelib.admin.views import SessionViews
    from chalicelib.auth.authorizer import Authenticator
    from chalicelib.auth.oidc import OidcVerifier
    from chalicelib.check.approvals import Approvals
    from chalicelib.check.auditing import Auditor
    from chalicelib.check.escalation import DeferredStreaks
    from chalicelib.check.hooks import DecisionListener
    from chalicelib.check.minted import SessionMint
    from chalicelib.check.results import ResultDesk
    from chalicelib.check.runaway import AdminChanges
    from chalicelib.check.tickets import HoldTickets, TicketSigner
    from chalicelib.links.actions import LinkDesk, LinkMaker
    from chalicelib.links.approval_links import ApprovalLinkMaker
    from chalicelib.links.signing import LinkSigner
    from chalicelib.notify import Notifier, Publisher
    from chalicelib.quota.answers import Allowed, Refused
    from chalicelib.quota.core import Attempt
    from chalicelib.signed import KeyRing

# Counted once per request answered 503 `misconfigured` (an invalid policy).
MISCONFIGURED_METRIC = "Misconfigured"

# A warm container re-reads the link keys this often: a key withdrawn after a leak
# (`make rotate-link-key LEAKED=1`) stops signing and verifying within a minute, and at
# once where a link names the new key (LinkSigner's reload). One GetSecretValue pair a
# minute per container that handles links: the refusals and the link pages only.
LINK_KEYS_CACHE_MS = 60 * 1000
# The administrators' writes that change whether a remembered refusal still holds.
SESSION_ADMIN_WRITES = frozenset({"raise_limit", "lower", "suspend", "resume", "reset"})
BUDGET_ADMIN_WRITES = frozenset({"raise_limit", "suspend", "resume", "reset"})
Opener = Callable[[Settings, tuple[str, ...], Callable[[], Any], Callable[[], Any]], Stores]

# The one place a backend is chosen: each opens every port lazily.
OPENERS: dict[str, Opener] = {"dynamodb": dynamodb.open_stores, "memory": memory.open_stores}


class OnFirstEffect:
    """The `DecisionListener`, built (audit, email, links) on the first decision that has
    an effect: a container that only allows calls, none spending a session, never loads it."""

    def __init__(self, build: Callable[[], DecisionListener]) -> None:
        self._build = build
        self._listener: DecisionListener | None = None

    def _built(self) -> DecisionListener:
        if self._listener is None:
            self._listener = self._build()
        return self._listener

    def on_block(self, tenant: str, attempt: Attempt, decision: Refused) -> None:
        self._built().on_block(tenant, attempt, decision)

    def on_counted(self, tenant: str, attempt: Attempt, allowed: Allowed) -> None:
        if allowed.spent:  # the one allowed call with an effect
            self._built().on_counted(tenant, attempt, allowed)

    def on_shadow(self, tenant: str, attempt: Attempt, would: Refused) -> None:
        self._built().on_shadow(tenant, attempt, would)


class Container:
    """The service's objects for one Lambda container (or one local process)."""

    def __init__(self, settings: Settings | None = None, clock: Clock = system_clock) -> None:
        self._settings = settings
        self.clock = clock
        self.afterwards = Afterwards()  # writes checks leave for after their answers
        # The API's own base URL as a request showed it, for links when no
        # QUOTA_PUBLIC_URL is set (chalicelib/api/context.py fills it in).
        self.seen_base_url = ""
        self._signer: LinkSigner | None = None
        self._signer_read_at: int | None = None

    @cached_property
    def settings(self) -> Settings:
        return self._settings or Settings.from_env()

    @cached_property
    def policy(self) -> Policy:
        """The stage's quota policy, loaded on first use.

        Raises:
            Misconfigured: the policy cannot work (`make run` and `make package` refuse
                one, so only a hand-deployed one gets here); every request that needs
                it says so, with a metric, until it is fixed.
        """
        try:
            return load_policy(self.settings.policy)
        except ConfigurationError as exc:
            count(MISCONFIGURED_METRIC)
            logger.error("the quota policy cannot work", extra={"error": str(exc)})
            raise Misconfigured(
                "The quota service is misconfigured; nothing was counted. Its operators "
                "are alerted; retry later."
            ) from exc

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        return aws.client("dynamodb", config=CLIENT_CONFIG)

    @cached_property
    def token_dynamodb(self) -> DynamoDBClient:
        """The tokens table's client: one attempt per look-up (TOKEN_CLIENT_CONFIG)."""
        return aws.client("dynamodb", config=TOKEN_CLIENT_CONFIG)

    @cached_property
    def stores(self) -> Stores:
        """The backend's ports (`QUOTA_BACKEND`), each opened on first use."""
        opener = OPENERS[self.settings.backend]
        categories = tuple(self.policy.categories)
        return opener(self.settings, categories, lambda: self.dynamodb, lambda: self.token_dynamodb)

    # One property per port, so that a test can put a faulty adapter in its place.
    @cached_property
    def counters(self) -> SessionCounters:
        return self.stores.counters

    @cached_property
    def budgets(self) -> BudgetCounters:
        return self.stores.budgets

    @cached_property
    def gate(self) -> PrincipalGate:
        return PrincipalGate(self.budgets, self.clock, self.settings.grant_cache_seconds)

    @cached_property
    def tokens(self) -> TokenRepository:
        return self.stores.tokens

    @cached_property
    def audit_log(self) -> AuditLog:
        return self.stores.audit_log

    @cached_property
    def grants(self) -> GrantRepository:
        return self.stores.grants

    @cached_property
    def link_uses(self) -> LinkUses:
        return self.stores.link_uses

    @cached_property
    def trouble(self) -> TroubleIndex:
        return self.stores.trouble

    @cached_property
    def result_desk(self) -> ResultDesk:
        """Exactly-once writes: results of allowed calls, read back for duplicates."""
        from chalicelib.check.results import ResultDesk

        results, idle_s = self.stores.results, self.settings.idle_timeout_seconds
        return ResultDesk(self.policy, self.counters, results, self.clock, idle_s, self.afterwards)

    def mark_trouble(self, mark: TroubleMark) -> None:
        """Index a session in trouble (the index is built on the first refusal)."""
        self.trouble.mark(mark)

    def _link_keys(self) -> list[bytes]:
        """The link keys, newest first: the local secret, or the stack's secret's current
        and previous values."""
        secret = self.settings.link_secret.encode("utf-8")
        if secret or not self.settings.link_secret_arn:
            return [secret] if secret else []
        from chalicelib.links.secret import read_link_keys

        client = aws.client("secretsmanager", config=CLIENT_CONFIG)
        return read_link_keys(client, self.settings.link_secret_arn)

    @property
    def link_signer(self) -> LinkSigner | None:
        """The signer of the email's links, or None where no secret is configured. Read
        again every LINK_KEYS_CACHE_MS, so a warm container signs with a rotated key, and
        drops a withdrawn one, within a minute (and verifies one it has not seen at once)."""
        now = self.clock()
        if self._signer_read_at is None or now - self._signer_read_at >= LINK_KEYS_CACHE_MS:
            from chalicelib.links.signing import LinkSigner

            keys = self._link_keys()
            self._signer = LinkSigner(keys, reload=self._link_keys) if keys else None
            self._signer_read_at = now
        return self._signer

    @cached_property
    def keyring(self) -> KeyRing:
        """The link keys hold tickets and minted sessions are signed from, read again
        every LINK_KEYS_CACHE_MS (as `link_signer` reads them)."""
        from chalicelib.signed import KeyRing

        return KeyRing(self._link_keys, self.clock, LINK_KEYS_CACHE_MS)

    @property
    def ticket_signer(self) -> TicketSigner | None:
        """The signer of refusals' hold tickets; None without a link secret."""
        from chalicelib.check.tickets import TicketSigner

        return self.keyring.made(TicketSigner)

    @cached_property
    def session_mint(self) -> SessionMint:
        """Verifies echoed session tokens and mints the ones answers carry (issue 31)."""
        from chalicelib.check.minted import SessionMint

        return SessionMint(self.keyring, self.clock, self.settings.idle_timeout_seconds)

    def hold_tickets(self) -> HoldTickets:
        """Issues and redeems the tickets of clients' refusal holds."""
        from chalicelib.check.tickets import HoldTickets

        return HoldTickets(
            lambda: self.ticket_signer,
            lambda: self.link_uses,
            self.policy.suspend_after_refusals,
        )

    @property
    def base_url(self) -> str:
        return self.settings.public_url or self.seen_base_url

    def link_maker(self) -> LinkMaker | None:
        """Signs the email's links; None without a secret or a base URL."""
        from chalicelib.links.actions import LinkMaker

        signer = self.link_signer
        if signer is None or not self.base_url:
            return None
        return LinkMaker(signer, self.base_url, self.policy)

    def approval_link_maker(self) -> ApprovalLinkMaker | None:
        """Signs an approval email's links; None without a secret or a base URL."""
        from chalicelib.links.approval_links import ApprovalLinkMaker

        signer, base = self.link_signer, self.base_url
        return ApprovalLinkMaker(signer, base) if signer is not None and base else None

    def link_desk(self) -> LinkDesk | None:
        """Answers the links' pages (approve and deny ones as the admin API decides);
        None without a secret."""
        from chalicelib.links.actions import LinkDesk
        from chalicelib.links.approval_links import ApprovalDesk

        signer = self.link_signer
        if signer is None:
            return None
        return LinkDesk(
            signer,
            self.link_uses,
            lambda: self.admin,
            lambda: self.budget_admin,
            self.clock,
            self.base_url,
            lambda: ApprovalDesk(self.approvals, self.link_uses, self.clock, self.auditor.record),
        )

    @cached_property
    def sns(self) -> SNSClient:
        return aws.client("sns", config=CLIENT_CONFIG)

    # The refusal side (audit, email) and the admin side are imported on first use: a
    # container that only answers allowed checks never loads them (a shorter cold start).
    @cached_property
    def auditor(self) -> Auditor:
        from chalicelib.check.auditing import Auditor

        return Auditor(self.audit_log)

    @cached_property
    def limits(self) -> GrantLimits:
        return GrantLimits(
            self.policy, self.grants.list, self.clock, self.settings.grant_cache_seconds
        )

    @cached_property
    def notifier(self) -> Publisher:
        """How a refusal sends its email: onto the queue where one is configured (a
        deployed stack), else straight to SNS (`make run`)."""
        if self.settings.notify_queue_url:
            from chalicelib.notify import QueuedNotifier

            return QueuedNotifier(
                lambda: aws.client("sqs", config=CLIENT_CONFIG),
                self.settings.notify_queue_url,
                echo=self.settings.is_local,
            )
        return self.sns_notifier

    @cached_property
    def sns_notifier(self) -> Notifier:
        """Publishes to the topic: the notifier function's, or `make run`'s requests'."""
        from chalicelib.notify import Notifier

        return Notifier(lambda: self.sns, self.settings.topic_arn, echo=self.settings.is_local)

    @cached_property
    def views(self) -> SessionViews:
        from chalicelib.admin.views import SessionViews

        return SessionViews(
            self.policy,
            self.limits,
            self.clock,
            self.settings.idle_timeout_seconds,
            self.settings.last_calls,
        )

    @cached_property
    def admin(self) -> AdminService:
        from chalicelib.admin.actions import AdminService

        counters = self.admin_changes.watching(self.counters, SESSION_ADMIN_WRITES)
        return AdminService(
            self.policy,
            counters,
            self.grants,
            self.limits,
            self.audit_log,
            self.auditor,
            self.views,
            self.clock,
            self.settings.idle_timeout_seconds,
            self.trouble,
        )

    @cached_property
    def budget_admin(self) -> BudgetAdmin:
        from chalicelib.admin.budgets import BudgetAdmin

        budgets = self.admin_changes.watching(self.budgets, BUDGET_ADMIN_WRITES)
        streaks = self.deferred_streaks
        admin = (self.policy, budgets, self.limits, self.gate, self.auditor, self.clock)
        return BudgetAdmin(*admin, streaks)

    @cached_property
    def deferred_streaks(self) -> DeferredStreaks:
        """Refusals answered from memory here, waiting to count in their principal's
        streak: the check adds to them, an administrator's reset here ends them."""
        from chalicelib.check.escalation import DeferredStreaks

        return DeferredStreaks()

    @cached_property
    def admin_changes(self) -> AdminChanges:
        """The administrators' writes made in this container: a refusal the check
        remembers from before one is never answered from memory."""
        from chalicelib.check.runaway import AdminChanges

        return AdminChanges()

    @cached_property
    def token_admin(self) -> TokenAdmin:
        from chalicelib.admin.tokens import TokenAdmin

        return TokenAdmin(self.tokens, self.auditor, self.clock)

    @cached_property
    def authenticator(self) -> Authenticator:
        from chalicelib.auth.authorizer import Authenticator

        return Authenticator(self.settings, lambda: self.tokens, self.clock, lambda: self.sign_in)

    @cached_property
    def sign_in(self) -> OidcVerifier | None:
        """The identity provider's token verifier; None when none is configured. Built on
        the first token that looks like a JWT (or the console's first visit).

        Raises:
            IssuerUnavailable: the stack's Cognito app client could not be looked up
                (not kept: the next request tries again).
        """
        settings = self.settings
        if not settings.oidc_issuer:
            return None
        from chalicelib.auth import oidc
        from chalicelib.auth.jwt import Expected

        client_id = settings.oidc_client_id or self.cognito_client_id()
        keys = oidc.IssuerKeys(settings.oidc_issuer, oidc.fetch_json, self.clock)
        expected = Expected(settings.oidc_issuer, client_id)
        return oidc.OidcVerifier(keys, expected, settings.oidc_groups_claim, self.clock)

    def cognito_client_id(self) -> str:
        """The id of the stack's own user pool client, by its name: the client names the
        API in its callback URL, so the functions cannot be given its id without a cycle.

        Raises:
            IssuerUnavailable: the pool cannot be listed, or has no client of that name.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        from chalicelib.auth.oidc import IssuerUnavailable

        pool = self.settings.oidc_issuer.rsplit("/", 1)[-1]
        name = self.settings.oidc_cognito_client_name
        doing = "looking up the sign-in app client"
        try:
            cognito = aws.client("cognito-idp", config=CLIENT_CONFIG)
            pages = cognito.get_paginator("list_user_pool_clients").paginate(UserPoolId=pool)
            for page in pages:
                for client in page.get("UserPoolClients", []):
                    if client.get("ClientName") == name and client.get("ClientId"):
                        return str(client["ClientId"])
        except (BotoCoreError, ClientError) as exc:
            raise IssuerUnavailable(doing) from exc
        raise IssuerUnavailable(doing)

    def reporter(self) -> DecisionListener:
        """Audits a refusal, emails the administrators of a write refusal, marks spent and
        refused sessions in the trouble index, and audits shadow refusals."""
        from chalicelib.check.alerts import DecisionReporter

        return DecisionReporter(
            self.policy,
            self.auditor,
            self.notifier,
            links=self.link_maker,
            trouble=self.mark_trouble,
        )

    @cached_property
    def checks(self) -> CheckService:
        from chalicelib.check.runaway import REFUSAL_CACHE_MS

        return CheckService(
            self.policy,
            self.counters,
            self.clock,
            self.settings.idle_timeout_seconds,
            limits=self.limits,
            listener=OnFirstEffect(self.reporter),
            keep_calls=self.settings.last_calls,
            budgets=self.budgets,
            gate=self.gate,
            streaks=self.deferred_streaks,
            tickets=self.hold_tickets(),
            changes=self.admin_changes,
            refusal_cache_ms=REFUSAL_CACHE_MS,
            kept_answers=self.result_desk.answers_copy,
            afterwards=self.afterwards,
        )

    @cached_property
    def approvals(self) -> Approvals:
        """Approvals of single calls (issue 32): their store is opened on first use."""
        from chalicelib.check import approval_email
        from chalicelib.check.approvals import Approvals

        return Approvals(
            self.policy,
            self.stores.approvals,
            self.clock,
            lambda: self.auditor,
            lambda: self.base_url,
            approval_email.Emailer(lambda: self.notifier, self.approval_link_maker),
        )
