"""All configuration, read once from the environment; invalid values fail at start-up."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from chalicelib.quota.errors import ConfigurationError

LOCAL_STAGE = "local"
BACKENDS = ("dynamodb", "memory")


TOKEN_CACHE_MAX_SECONDS = 30
"""With API Gateway's 30 s authorizer cache (chalicelib/api/authorizer.py), a revoked
token stops checks within 60 s (chalicelib/auth/authorizer.py)."""


def _int(
    env: Mapping[str, str], name: str, default: int, minimum: int, maximum: int | None = None
) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name} must be an integer, got {raw!r}") from exc
    if value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigurationError(f"{name} must be <= {maximum}, got {value}")
    return value


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = env.get(name) or choices[0]
    if value not in choices:
        raise ConfigurationError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _secret(env: Mapping[str, str]) -> str:
    value = env.get("QUOTA_LINK_SECRET", "")
    if value and len(value) < 32:
        raise ConfigurationError("QUOTA_LINK_SECRET must be at least 32 characters")
    return value


def _url(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").rstrip("/")
    if value and not value.startswith(("https://", "http://")):
        raise ConfigurationError(f"{name} must be an http(s) URL, got {value!r}")
    return value


def _sign_in(env: Mapping[str, str]) -> tuple[str, str, str]:
    """The identity provider: its issuer, and the console's client id or (the stack's own
    Cognito user pool) the app client's name to look its id up by."""
    issuer = _url(env, "QUOTA_OIDC_ISSUER")
    client_id = env.get("QUOTA_OIDC_CLIENT_ID", "")
    client_name = env.get("QUOTA_OIDC_COGNITO_CLIENT_NAME", "")
    if issuer and bool(client_id) == bool(client_name):
        raise ConfigurationError(
            "QUOTA_OIDC_ISSUER needs exactly one of QUOTA_OIDC_CLIENT_ID and "
            "QUOTA_OIDC_COGNITO_CLIENT_NAME"
        )
    if not issuer and (client_id or client_name):
        raise ConfigurationError("QUOTA_OIDC_CLIENT_ID needs QUOTA_OIDC_ISSUER")
    return issuer, client_id, client_name


@dataclass(frozen=True)
class Settings:
    """The service's settings for one stage."""

    stage: str
    backend: str
    counters_table: str
    tokens_table: str
    audit_table: str
    grants_table: str
    topic_arn: str
    audit_ttl_days: int
    policy: str
    idle_timeout_seconds: int
    last_calls: int
    token_cache_seconds: int
    grant_cache_seconds: int
    dev_server_token: str
    dev_admin_token: str
    dev_tenant: str
    dev_tokens: bool  # the fixed development tokens are accepted: only `make run` says so
    link_secret: str = ""  # signs the email's one-click links (local runner, tests)
    link_secret_arn: str = ""  # or: a Secrets Manager secret the stack creates (prod)
    public_url: str = ""  # the base URL of links and of the console in the email
    notify_queue_url: str = ""  # refusals enqueue their email here (prod); empty: SNS direct
    usage_key_scope: str = ""  # the stack's name: the authorizer names tenants' usage keys
    oidc_issuer: str = ""  # people sign in through this OpenID Connect issuer; empty: none
    oidc_client_id: str = ""  # the console's client id there (the tokens' audience)
    oidc_cognito_client_name: str = ""  # or: the stack's user pool client, found by name
    oidc_groups_claim: str = "cognito:groups"  # the claim of mcp-quota:<tenant>:<role> groups

    @property
    def is_local(self) -> bool:
        """The local stage: notifications are also printed to the console."""
        return self.stage == LOCAL_STAGE

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from environment variables.

        Raises:
            ConfigurationError: a variable has an invalid value.
        """
        env = os.environ if env is None else env
        sign_in = _sign_in(env)
        return cls(
            stage=env.get("QUOTA_STAGE", "prod"),
            backend=_choice(env, "QUOTA_BACKEND", BACKENDS),
            counters_table=env.get("QUOTA_COUNTERS_TABLE", "mcp-quota-counters"),
            tokens_table=env.get("QUOTA_TOKENS_TABLE", "mcp-quota-tokens"),
            audit_table=env.get("QUOTA_AUDIT_TABLE", "mcp-quota-audit"),
            grants_table=env.get("QUOTA_GRANTS_TABLE", "mcp-quota-grants"),
            topic_arn=env.get("QUOTA_TOPIC_ARN", ""),
            audit_ttl_days=_int(env, "QUOTA_AUDIT_TTL_DAYS", 90, 1),
            policy=env.get("QUOTA_POLICY", "default.json"),
            idle_timeout_seconds=_int(env, "QUOTA_IDLE_TIMEOUT_SECONDS", 3600, 1),
            last_calls=_int(env, "QUOTA_LAST_CALLS", 10, 1),
            token_cache_seconds=_int(
                env,
                "QUOTA_TOKEN_CACHE_SECONDS",
                TOKEN_CACHE_MAX_SECONDS,
                0,
                TOKEN_CACHE_MAX_SECONDS,
            ),
            grant_cache_seconds=_int(env, "QUOTA_GRANT_CACHE_SECONDS", 30, 0),
            dev_server_token=env.get("QUOTA_DEV_SERVER_TOKEN", "dev-server-token"),
            dev_admin_token=env.get("QUOTA_DEV_ADMIN_TOKEN", "dev-admin-token"),
            dev_tenant=env.get("QUOTA_DEV_TENANT", "demo"),
            # An explicit switch, set only by scripts/serve_local.py: never a stage name.
            dev_tokens=env.get("QUOTA_DEV_TOKENS") == "1",
            link_secret=_secret(env),
            link_secret_arn=env.get("QUOTA_LINK_SECRET_ARN", ""),
            public_url=_url(env, "QUOTA_PUBLIC_URL"),
            notify_queue_url=env.get("QUOTA_NOTIFY_QUEUE_URL", ""),
            usage_key_scope=env.get("QUOTA_USAGE_KEY_SCOPE", ""),
            oidc_issuer=sign_in[0],
            oidc_client_id=sign_in[1],
            oidc_cognito_client_name=sign_in[2],
            oidc_groups_claim=env.get("QUOTA_OIDC_GROUPS_CLAIM") or "cognito:groups",
        )
