"""Builds the service's dependencies once per container, lazily, so that importing the
app costs little and tests can start moto (or point at dynalite) before anything connects."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

from chalicelib.admin import AdminService
from chalicelib.alerts import BlockReporter
from chalicelib.audit import Auditor
from chalicelib.auth import Authenticator
from chalicelib.clock import Clock, system_clock
from chalicelib.grants import GrantLimits
from chalicelib.notify import Notifier
from chalicelib.policy import Policy, load_policy
from chalicelib.service import CheckService
from chalicelib.settings import Settings
from chalicelib.storage.audit import AuditStore
from chalicelib.storage.counters import CounterStore
from chalicelib.storage.grants import GrantStore
from chalicelib.storage.tokens import TokenStore

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient

# A check must answer fast or fail clearly: short timeouts, one retry inside botocore.
CLIENT_CONFIG = Config(
    connect_timeout=1,
    read_timeout=2,
    retries={"max_attempts": 2, "mode": "standard"},
    max_pool_connections=50,
)


class Container:
    """The service's objects for one Lambda container (or one local process)."""

    def __init__(self, settings: Settings | None = None, clock: Clock = system_clock) -> None:
        self._settings = settings
        self.clock = clock

    @cached_property
    def settings(self) -> Settings:
        return self._settings or Settings.from_env()

    @cached_property
    def policy(self) -> Policy:
        return load_policy(self.settings.policy)

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        return boto3.client("dynamodb", config=CLIENT_CONFIG)

    @cached_property
    def counters(self) -> CounterStore:
        return CounterStore(self.dynamodb, self.settings.counters_table, self.settings.last_calls)

    @cached_property
    def tokens(self) -> TokenStore:
        return TokenStore(self.dynamodb, self.settings.tokens_table)

    @cached_property
    def sns(self) -> SNSClient:
        return boto3.client("sns", config=CLIENT_CONFIG)

    @cached_property
    def audit_store(self) -> AuditStore:
        return AuditStore(self.dynamodb, self.settings.audit_table, self.settings.audit_ttl_days)

    @cached_property
    def auditor(self) -> Auditor:
        return Auditor(self.audit_store)

    @cached_property
    def grants(self) -> GrantStore:
        return GrantStore(self.dynamodb, self.settings.grants_table)

    @cached_property
    def limits(self) -> GrantLimits:
        return GrantLimits(
            self.policy, self.grants.list, self.clock, self.settings.grant_cache_seconds
        )

    @cached_property
    def notifier(self) -> Notifier:
        return Notifier(lambda: self.sns, self.settings.topic_arn, echo=self.settings.is_local)

    @cached_property
    def admin(self) -> AdminService:
        return AdminService(
            self.policy,
            self.counters,
            self.grants,
            self.limits,
            self.audit_store,
            self.auditor,
            self.clock,
            self.settings.idle_timeout_seconds,
        )

    @cached_property
    def authenticator(self) -> Authenticator:
        return Authenticator(self.settings, lambda: self.tokens, self.clock)

    @cached_property
    def checks(self) -> CheckService:
        return CheckService(
            self.policy,
            self.counters,
            self.clock,
            self.settings.idle_timeout_seconds,
            limits=self.limits,
            listener=BlockReporter(self.policy, self.auditor, self.notifier),
        )
