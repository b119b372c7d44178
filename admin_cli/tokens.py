"""`mcp-quota token ...`: create, list and revoke bearer tokens in the tokens table.

These commands talk to DynamoDB with the operator's own AWS credentials (the root of trust),
not to the service, so that the first admin token can be created at all. Only the hash of a
token is stored; the token itself is printed once. `admin_cli.main` imports this module only
for token commands, so the HTTP commands never load boto3.
"""

from __future__ import annotations

import getpass
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import NoCredentialsError, NoRegionError

from admin_cli import render
from admin_cli.errors import CliError, ExitCode, exit_code_for_status
from admin_cli.render import Output
from chalicelib.admin.views import token_view
from chalicelib.auth.roles import TENANT_NAME
from chalicelib.auth.tokens import ROLES, hash_secret, new_token
from chalicelib.clock import iso_utc
from chalicelib.errors import NotFound, from_storage
from chalicelib.quota.events import TENANT_SCOPE, AuditEvent, EventType
from chalicelib.storage.dynamodb.audit import AuditStore
from chalicelib.storage.dynamodb.tokens import TokenStore
from chalicelib.storage.ports import RecordNotFound, StorageError
from chalicelib.storage.records import TokenRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

TOKEN_ID = re.compile(r"^[0-9a-f]{12}$")
MAX_NAME = 64
STORED_EMPTY_NAME = "-"  # TokenStore stores an empty name as "-"
REGION_ENV = "AWS_REGION"


def check_tenant(tenant: str) -> str:
    """A valid tenant name.

    Raises:
        CliError: the name breaks the tenant naming rule (usage).
    """
    if not TENANT_NAME.fullmatch(tenant):
        raise CliError(
            f"Tenant {tenant!r} is not a valid tenant name: use 1 to 63 lowercase letters, "
            "digits and '-', starting with a letter or digit.",
            ExitCode.USAGE,
        )
    return tenant


def check_role(role: str) -> str:
    """A known role.

    Raises:
        CliError: the role is not one of ROLES (usage).
    """
    if role not in ROLES:
        raise CliError(
            f"Role {role!r} is not a role: use one of {', '.join(ROLES)}.", ExitCode.USAGE
        )
    return role


def check_name(name: str) -> str:
    """A token's descriptive name: printable, at most MAX_NAME characters.

    Raises:
        CliError: the name is too long or holds control characters (usage).
    """
    if len(name) > MAX_NAME or not name.isprintable():
        raise CliError(
            f"The token name must be at most {MAX_NAME} printable characters.", ExitCode.USAGE
        )
    return name


def check_token_id(token_id: str) -> str:
    """A token's public id (the 12 hex characters after `mcpq_`).

    Raises:
        CliError: the text is not a token id (usage).
    """
    if not TOKEN_ID.fullmatch(token_id):
        raise CliError(
            f"{token_id!r} is not a token id: a token id is the 12 hex characters after "
            "'mcpq_' in the token, as printed by `mcp-quota token create` and `token list`.",
            ExitCode.USAGE,
        )
    return token_id


@contextmanager
def store_errors() -> Iterator[None]:
    """Turn the token store's errors into CLI errors with the matching exit code.

    Raises:
        CliError: the store failed, refused the credentials, or found nothing.
    """
    try:
        yield
    except StorageError as exc:
        if isinstance(exc.__cause__, NoCredentialsError):
            raise CliError(
                "No AWS credentials found: token commands write the tokens table with your "
                "own AWS credentials (set AWS_PROFILE or AWS_ACCESS_KEY_ID/"
                "AWS_SECRET_ACCESS_KEY).",
                ExitCode.AUTH,
            ) from exc
        error = from_storage(exc)
        if isinstance(exc, RecordNotFound):
            error = NotFound(f"No such token ({exc.doing}).")
        raise CliError(error.message, exit_code_for_status(error.STATUS_CODE)) from exc


def region_from(flag: str | None, env: Mapping[str, str]) -> str | None:
    """The AWS region: --region, else AWS_REGION, else None for boto3 to resolve
    (AWS_DEFAULT_REGION, then the profile). boto3 alone never reads AWS_REGION, which the
    AWS CLI and the other SDKs honour first."""
    return flag or env.get(REGION_ENV) or None


def dynamodb_client(region: str | None) -> DynamoDBClient:
    """A DynamoDB client from the operator's environment (AWS_ENDPOINT_URL is honoured).

    Raises:
        CliError: no AWS region is configured (usage).
    """
    try:
        # A session of its own: credentials resolved now, never cached from an earlier use.
        return boto3.session.Session().client("dynamodb", region_name=region)
    except NoRegionError as exc:
        raise CliError(
            f"No AWS region configured: pass --region or set {REGION_ENV}.", ExitCode.USAGE
        ) from exc


def create_token(
    store: TokenStore,
    tenant: str,
    role: str,
    name: str,
    now_ms: int,
    principals: tuple[str, ...] = (),
    expires_in_days: int | None = None,
) -> tuple[TokenRecord, str]:
    """Store a new token's hash and return the record with the token (never stored).

    Raises:
        CliError: the input is invalid or the store failed.
    """
    record_name = check_name(name)
    if expires_in_days is not None and expires_in_days < 1:
        raise CliError("--expires-in-days must be at least 1.", ExitCode.USAGE)
    token_id, token = new_token()
    record = TokenRecord(
        token_id=token_id,
        secret_hash=hash_secret(token),
        tenant=check_tenant(tenant),
        role=check_role(role),
        name=record_name,
        created_at_ms=now_ms,
        principals=principals,
        expires_at_ms=None if expires_in_days is None else now_ms + expires_in_days * 86_400_000,
    )
    if principals and record.role != "server":
        raise CliError("Only server tokens may be bound to principals.", ExitCode.USAGE)
    with store_errors():
        store.put(record)
    return record, token


def revoke_token(store: TokenStore, token_id: str, now_ms: int) -> tuple[TokenRecord, bool]:
    """Revoke a token; returns its record and whether it had already been revoked.

    Raises:
        CliError: the id is malformed, unknown (not found), or the store failed.
    """
    try:
        with store_errors():
            record = store.revoke(check_token_id(token_id), now_ms)
    except CliError as exc:
        if isinstance(exc.__cause__, RecordNotFound):
            raise CliError(f"No token with id {token_id!r}.", exc.exit_code) from exc
        raise
    # The store keeps the first revocation time, so a different time means "already".
    return record, record.revoked_at_ms != now_ms


def list_tokens(store: TokenStore, tenant: str | None) -> list[TokenRecord]:
    """Every token, or one tenant's, oldest first.

    Raises:
        CliError: the tenant name is invalid or the store failed.
    """
    if tenant is not None:
        check_tenant(tenant)
    with store_errors():
        return store.list(tenant)


def token_json(record: TokenRecord) -> dict[str, Any]:
    """A token's public fields for `--json` (never the hash): as the admin API shows it,
    plus its expiry when it has one."""
    view: dict[str, Any] = dict(token_view(record))
    if record.expires_at_ms is not None:
        view["expires_at"] = iso_utc(record.expires_at_ms)
    return view


def store_for(table: str, region: str | None) -> TokenStore:
    """The token store on `table`, reached with the operator's AWS configuration.

    Raises:
        CliError: no AWS region is configured (usage).
    """
    return TokenStore(dynamodb_client(region), table)


class TokenAudit:
    """Records token changes in the audit trail; a failed write is a warning on stderr
    (the token change itself already happened and is reported on stdout)."""

    def __init__(self, store: AuditStore | None) -> None:
        self._store = store

    def record(self, event_type: EventType, record: TokenRecord, now_ms: int, after: Any) -> None:
        """Append one token event to the tenant's audit trail."""
        if self._store is None:
            return
        try:
            user = getpass.getuser()
        except (OSError, KeyError):
            user = "unknown"
        actor = f"operator:{user}"
        event = AuditEvent(now_ms, event_type, record.tenant, TENANT_SCOPE, actor, after=after)
        try:
            self._store.put(event)
        except StorageError as exc:
            print(
                f"mcp-quota: warning: not written to the audit trail while {exc.doing}",
                file=sys.stderr,
            )


def audit_store_for(table: str, region: str | None, ttl_days: int) -> AuditStore:
    """The audit table, reached with the operator's AWS configuration.

    Raises:
        CliError: no AWS region is configured (usage).
    """
    return AuditStore(dynamodb_client(region), table, ttl_days)


def command_create(
    store: TokenStore,
    tenant: str,
    role: str,
    name: str,
    now_ms: int,
    trail: TokenAudit | None = None,
    principals: tuple[str, ...] = (),
    expires_in_days: int | None = None,
) -> Output:
    """`token create`: the new token, shown this once.

    Raises:
        CliError: the input is invalid or the store failed.
    """
    record, token = create_token(store, tenant, role, name, now_ms, principals, expires_in_days)
    shown = token_json(record)
    (trail or TokenAudit(None)).record(EventType.TOKEN_CREATED, record, now_ms, shown)
    data = {**shown, "token": token}
    fields = [("Token id", record.token_id), ("Name", record.name), ("Token", token)]
    if record.expires_at_ms is not None:
        fields.append(("Expires", data["expires_at"]))
    text = "\n".join(
        [
            f"Created {record.role} token for tenant {record.tenant}.",
            "",
            render.fields(fields),
            "",
            "Store the token now: it is shown only this once, and only its hash is kept.",
        ]
    )
    return Output(data, text)


def command_revoke(
    store: TokenStore, token_id: str, now_ms: int, trail: TokenAudit | None = None
) -> Output:
    """`token revoke`: revoke one token (again is harmless).

    Raises:
        CliError: the id is malformed or unknown, or the store failed.
    """
    record, already = revoke_token(store, token_id, now_ms)
    if not already:
        (trail or TokenAudit(None)).record(
            EventType.TOKEN_REVOKED, record, now_ms, token_json(record)
        )
    data = token_json(record)
    token_id, tenant, role = (render.cell(data[k]) for k in ("token_id", "tenant", "role"))
    when = data["revoked_at"]
    if already:
        text = f"Token {token_id} (tenant {tenant}) was already revoked at {when}."
    else:
        text = (
            f"Revoked {role} token {token_id} (tenant {tenant}) at {when}. "
            "It changes nothing from now on; checks may still pass for up to 60 s (caches)."
        )
    return Output(data, text)


def command_list(store: TokenStore, tenant: str | None) -> Output:
    """`token list`: tokens with their tenant, role and state; never hashes.

    Raises:
        CliError: the tenant name is invalid or the store failed.
    """
    records = list_tokens(store, tenant)
    data = {"tokens": [token_json(r) for r in records]}
    if not records:
        return Output(data, "No tokens.")
    headers = ("TOKEN ID", "TENANT", "ROLE", "NAME", "CREATED", "REVOKED")
    rows = [
        (t["token_id"], t["tenant"], t["role"], t["name"], t["created_at"], t["revoked_at"])
        for t in data["tokens"]
    ]
    return Output(data, render.table(headers, rows))
