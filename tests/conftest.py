"""Fixtures shared by every test layer."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from moto import mock_aws

from tests.support import (
    Backend,
    FixedClock,
    client_for,
    dynalite_server,
    fake_aws_env,
    fresh_settings,
    provisioned,
)

fake_aws_env()


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture(scope="session")
def dynalite_endpoint() -> Iterator[str]:
    with dynalite_server() as endpoint:
        yield endpoint


@pytest.fixture
def moto_aws() -> Iterator[None]:
    with mock_aws():
        yield


@pytest.fixture(params=["moto", "dynalite"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Fresh tables on each DynamoDB implementation: one contract, every store."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    if request.param == "moto":
        with mock_aws():
            client = client_for(None)
            yield Backend("moto", client, provisioned(client, fresh_settings(prefix)))
    else:
        endpoint = request.getfixturevalue("dynalite_endpoint")
        client = client_for(endpoint, pool=70)
        yield Backend("dynalite", client, provisioned(client, fresh_settings(prefix)))
