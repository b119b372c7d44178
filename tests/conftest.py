"""Fixtures shared by every test layer."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from moto import mock_aws

from chalicelib.policy import load_policy
from tests.support import (
    Backend,
    FixedClock,
    Stores,
    client_for,
    dynalite_server,
    dynamodb_stores,
    fake_aws_env,
    fresh_settings,
    memory_stores,
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


def _backend(request: pytest.FixtureRequest, name: str) -> Iterator[Backend]:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    if name == "moto":
        with mock_aws():
            client = client_for(None)
            yield Backend("moto", client, provisioned(client, fresh_settings(prefix)))
    else:
        endpoint = request.getfixturevalue("dynalite_endpoint")
        client = client_for(endpoint, pool=70)
        yield Backend("dynalite", client, provisioned(client, fresh_settings(prefix)))


@pytest.fixture(params=["moto", "dynalite"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Fresh tables on each DynamoDB implementation, for tests that need the client."""
    yield from _backend(request, request.param)


@pytest.fixture(params=["memory", "moto", "dynalite"])
def stores(request: pytest.FixtureRequest) -> Iterator[Stores]:
    """The four storage ports on each backend (fresh tables per test): one behaviour
    suite, every adapter, so the in-memory one can never drift from DynamoDB."""
    categories = tuple(load_policy("default.json").categories)
    if request.param == "memory":
        yield memory_stores(categories)
        return
    for backend in _backend(request, request.param):
        yield dynamodb_stores(backend, categories)
