"""`mcp-quota token ...` against DynamoDB on moto, checked through the real Authenticator."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from moto import mock_aws

from admin_cli.provision import create_tables
from admin_cli.render import escape
from chalicelib.auth.authorizer import Authenticator
from chalicelib.auth.tokens import ADMIN, SERVER, hash_secret
from chalicelib.quota.events import TENANT_SCOPE
from chalicelib.settings import Settings
from chalicelib.storage.dynamodb.audit import AuditStore
from chalicelib.storage.dynamodb.tokens import TokenStore
from chalicelib.storage.records import TokenRecord
from tests.cli.conftest import HOSTILE_TEXT, Cli, unsafe_characters
from tests.support import FixedClock, client_for, fresh_settings

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


@dataclass(frozen=True)
class Tables:
    client: DynamoDBClient
    settings: Settings

    @property
    def table(self) -> str:
        return self.settings.tokens_table

    def authenticator(self) -> Authenticator:
        store = TokenStore(self.client, self.table)
        return Authenticator(self.settings, lambda: store, FixedClock())

    def raw_items(self) -> list[Mapping[str, object]]:
        return list(self.client.scan(TableName=self.table)["Items"])


@pytest.fixture
def tables() -> Iterator[Tables]:
    with mock_aws():
        client = client_for(None)
        settings = fresh_settings(f"cli{uuid.uuid4().hex[:8]}")
        create_tables(client, settings)
        yield Tables(client, settings)


def _create(cli: Cli, tables: Tables, *extra: str) -> dict[str, str]:
    run = cli("token", "create", "--table", tables.table, "--json", *extra)
    assert run.code == 0, run.err
    data: dict[str, str] = json.loads(run.out)
    return data


def test_create_prints_the_token_once_and_stores_only_its_hash(cli: Cli, tables: Tables) -> None:
    run = cli(
        "token", "create", "--table", tables.table, "--tenant", "acme", "--role", "admin",
        "--name", "ops laptop",
    )  # fmt: skip

    assert run.code == 0, run.err
    token_line = next(line for line in run.out.splitlines() if line.startswith("Token:"))
    token = token_line.split()[-1]
    assert token.startswith("mcpq_")
    assert "shown only this once" in run.out
    [item] = tables.raw_items()
    assert item["secret_hash"] == {"S": hash_secret(token)}
    assert item["tenant"] == {"S": "acme"}
    assert item["role"] == {"S": "admin"}
    assert item["name"] == {"S": "ops laptop"}
    secret = token.rsplit("_", 1)[1]
    assert secret not in json.dumps(item)


def test_the_created_token_authenticates_until_revoked(cli: Cli, tables: Tables) -> None:
    created = _create(cli, tables, "--tenant", "acme", "--role", "server")
    auth = tables.authenticator()

    before = auth.authenticate(f"Bearer {created['token']}")

    assert before.identity is not None
    assert (before.identity.tenant, before.identity.role) == ("acme", SERVER)
    assert before.identity.token_id == created["token_id"]

    revoked = cli("token", "revoke", created["token_id"], "--table", tables.table)

    assert revoked.code == 0, revoked.err
    assert revoked.out.startswith(f"Revoked server token {created['token_id']} (tenant acme)")
    after = auth.authenticate(f"Bearer {created['token']}")
    assert after.identity is None
    assert after.reason == "revoked token"


def test_revoking_twice_keeps_the_first_time(cli: Cli, tables: Tables) -> None:
    created = _create(cli, tables, "--tenant", "acme", "--role", "admin")
    first = cli("token", "revoke", created["token_id"], "--table", tables.table, "--json")
    assert first.code == 0, first.err

    again = cli("token", "revoke", created["token_id"], "--table", tables.table)

    assert again.code == 0, again.err
    revoked_at = json.loads(first.out)["revoked_at"]
    assert again.out.strip().endswith(f"was already revoked at {revoked_at}.")


def test_list_shows_tokens_without_secrets_and_filters_by_tenant(cli: Cli, tables: Tables) -> None:
    acme = _create(cli, tables, "--tenant", "acme", "--role", "admin", "--name", "ci")
    other = _create(cli, tables, "--tenant", "other", "--role", "server")
    assert cli("token", "revoke", other["token_id"], "--table", tables.table).code == 0

    everything = cli("token", "list", "--table", tables.table)
    only_acme = cli("token", "list", "--table", tables.table, "--tenant", "acme", "--json")

    assert everything.code == 0, everything.err
    lines = everything.out.splitlines()
    assert lines[0].split() == ["TOKEN", "ID", "TENANT", "ROLE", "NAME", "CREATED", "REVOKED"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows[acme["token_id"]][1:4] == ["acme", "admin", "ci"]
    assert rows[acme["token_id"]][-1] == "-"
    assert rows[other["token_id"]][1:3] == ["other", "server"]
    assert rows[other["token_id"]][-1].endswith("Z")
    assert acme["token"] not in everything.out
    assert other["token"] not in everything.out
    listed = json.loads(only_acme.out)["tokens"]
    assert [t["token_id"] for t in listed] == [acme["token_id"]]
    assert set(listed[0]) == {
        "token_id",
        "tenant",
        "role",
        "name",
        "principals",
        "created_at",
        "revoked_at",
    }


# A lone surrogate is not UTF-8, so DynamoDB cannot store one (the HTTP tests cover it).
@pytest.mark.parametrize("text", [t for t in HOSTILE_TEXT if t != "\ud800"])
def test_list_escapes_a_stored_name(cli: Cli, tables: Tables, text: str) -> None:
    # The CLI refuses such names, but the table can be written by other means.
    record = TokenRecord("0123456789ab", hash_secret("x"), "acme", ADMIN, text, 1_000)
    TokenStore(tables.client, tables.table).put(record)

    run = cli("token", "list", "--table", tables.table)

    assert run.code == 0, run.err
    assert unsafe_characters(run.out) == [] and unsafe_characters(run.err) == []
    assert escape(text) in run.out


def test_table_name_comes_from_the_environment(
    cli: Cli, tables: Tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUOTA_TOKENS_TABLE", tables.table)

    run = cli("token", "create", "--tenant", "acme", "--role", ADMIN)

    assert run.code == 0, run.err
    assert len(tables.raw_items()) == 1


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--tenant", "Acme", "--role", "admin"], "not a valid tenant name"),
        (["--tenant=-acme", "--role", "admin"], "not a valid tenant name"),
        (["--tenant", "acme", "--role", "root"], "invalid choice: 'root'"),
        (["--tenant", "acme", "--role", "admin", "--name", "a\nb"], "printable"),
        (["--tenant", "acme", "--role", "admin", "--name", "x" * 65], "at most 64"),
        (["--role", "admin"], "--tenant"),
    ],
)
def test_create_refuses_bad_input_and_stores_nothing(
    cli: Cli, tables: Tables, argv: list[str], complaint: str
) -> None:
    run = cli("token", "create", "--table", tables.table, *argv)

    assert run.code == 2
    assert complaint in run.err
    assert tables.raw_items() == []


def test_revoke_unknown_token_exits_3(cli: Cli, tables: Tables) -> None:
    run = cli("token", "revoke", "0123456789ab", "--table", tables.table)

    assert run.code == 3
    assert "0123456789ab" in run.err


def test_revoke_malformed_id_exits_2(cli: Cli, tables: Tables) -> None:
    run = cli("token", "revoke", "mcpq_0123456789ab_secret", "--table", tables.table)

    assert run.code == 2
    assert "not a token id" in run.err


def test_missing_table_exits_6_with_the_store_message(cli: Cli, tables: Tables) -> None:
    run = cli("token", "list", "--table", "no-such-table")

    assert run.code == 6
    assert "ResourceNotFoundException" in run.err


def test_missing_aws_credentials_exit_4(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", f"{tmp_path}/none")
    monkeypatch.setenv("AWS_CONFIG_FILE", f"{tmp_path}/none")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    run = cli("token", "list", "--table", "t", "--region", "us-east-1")

    assert run.code == 4
    assert "No AWS credentials" in run.err


def _only_region_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, region: str | None) -> None:
    """AWS_REGION alone decides the region: no AWS_DEFAULT_REGION, no profile config."""
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", f"{tmp_path}/none")
    if region is None:
        monkeypatch.delenv("AWS_REGION", raising=False)
    else:
        monkeypatch.setenv("AWS_REGION", region)


def test_aws_region_alone_selects_the_region(
    cli: Cli, tables: Tables, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The tables exist in us-east-1 only (moto keeps regions apart); a region other than
    # AWS_REGION's would find no table, and no region at all would fail before any call.
    _only_region_env(monkeypatch, tmp_path, "us-east-1")

    run = cli("token", "create", "--table", tables.table, "--tenant", "acme", "--role", "admin")

    assert run.code == 0, run.err
    assert len(tables.raw_items()) == 1
    elsewhere = cli("token", "list", "--table", tables.table, "--region", "eu-west-2")
    assert elsewhere.code == 6  # --region wins over AWS_REGION, and there is no table there


def test_no_region_at_all_says_to_set_aws_region(
    cli: Cli, tables: Tables, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _only_region_env(monkeypatch, tmp_path, None)

    run = cli("token", "create", "--table", tables.table, "--tenant", "acme", "--role", "admin")

    assert run.code == 2
    assert "set AWS_REGION" in run.err
    assert tables.raw_items() == []


def test_token_commands_do_not_need_the_service_url_or_token(cli: Cli, tables: Tables) -> None:
    run = cli("token", "list", "--table", tables.table)

    assert run.code == 0, run.err
    assert run.out.strip() == "No tokens."


def test_token_changes_go_to_the_tenant_audit_trail(
    cli: Cli, tables: Tables, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QUOTA_AUDIT_TABLE", tables.settings.audit_table)
    created = _create(cli, tables, "--tenant", "acme", "--role", "admin")
    assert cli("token", "revoke", created["token_id"], "--table", tables.table).code == 0
    store = AuditStore(tables.client, tables.settings.audit_table)
    events = store.page("acme", TENANT_SCOPE).events
    assert [e.type for e in events] == ["token_created", "token_revoked"]
    assert all(e.actor.startswith("operator:") for e in events)
    assert events[0].after["token_id"] == created["token_id"]
    assert created["token"] not in json.dumps([e.to_json() for e in events])


def test_an_audit_outage_is_a_warning_not_a_failed_create(cli: Cli, tables: Tables) -> None:
    run = cli("token", "create", "--table", tables.table, "--tenant", "acme", "--role", "admin")
    assert run.code == 0 and "not written to the audit trail" in run.err
