"""`mcp-quota token create --expires-in-days`: the token stops at its expiry."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime

import pytest
from moto import mock_aws

from admin_cli.provision import create_tables
from chalicelib.auth.authorizer import Authenticator
from chalicelib.settings import Settings
from chalicelib.storage.dynamodb.tokens import TokenStore
from tests.cli.conftest import Cli
from tests.support import FixedClock, client_for, fresh_settings

DAY_MS = 86_400_000


@pytest.fixture
def table() -> Iterator[tuple[TokenStore, Settings]]:
    with mock_aws():
        client = client_for(None)
        settings = fresh_settings(f"exp{uuid.uuid4().hex[:8]}")
        create_tables(client, settings)
        yield TokenStore(client, settings.tokens_table), settings


def test_a_token_with_an_expiry_works_until_then(
    cli: Cli, table: tuple[TokenStore, Settings]
) -> None:
    store, settings = table
    run = cli(
        "token", "create", "--table", settings.tokens_table, "--tenant", "acme",
        "--role", "server", "--expires-in-days", "7", "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    created = json.loads(run.out)
    record = store.get(created["token_id"])
    assert record is not None and record.expires_at_ms is not None
    assert record.expires_at_ms - record.created_at_ms == 7 * DAY_MS
    shown = datetime.fromisoformat(created["expires_at"].replace("Z", "+00:00"))
    assert int(shown.timestamp() * 1000) == record.expires_at_ms // 1000 * 1000

    clock = FixedClock(record.expires_at_ms - 1)
    auth = Authenticator(settings, lambda: store, clock)
    header = f"Bearer {created['token']}"
    assert auth.authenticate(header).identity is not None
    clock.advance(0.001)
    expired = auth.authenticate(header)
    assert (expired.identity, expired.reason) == (None, "expired token")


def test_an_expiry_needs_at_least_a_day_and_the_tokens_table(
    cli: Cli, table: tuple[TokenStore, Settings]
) -> None:
    _, settings = table
    zero = cli(
        "token", "create", "--table", settings.tokens_table, "--tenant", "acme",
        "--role", "server", "--expires-in-days", "0",
    )  # fmt: skip
    assert zero.code == 2 and "at least 1" in zero.err
    api = cli(
        "--url", "http://127.0.0.1:9", "--token", "t",
        "token", "create", "--api", "--role", "server", "--expires-in-days", "3",
    )  # fmt: skip
    assert api.code == 2 and "without --api" in api.err
