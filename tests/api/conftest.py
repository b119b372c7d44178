"""The HTTP API in-process through Chalice's test client and the real authorizer."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from chalice.test import Client
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sns import sns_backends

import app as app_module
from chalicelib.auth.tokens import hash_secret, new_token
from chalicelib.settings import Settings
from chalicelib.storage.records import TokenRecord
from chalicelib.wiring import Container
from tests.support import ROOT, FixedClock, client_for, fresh_settings, provisioned

SERVER = {"Authorization": "Bearer dev-server-token", "Content-Type": "application/json"}
ADMIN = {"Authorization": "Bearer dev-admin-token", "Content-Type": "application/json"}


@dataclass
class Api:
    """A test client plus the container behind it."""

    client: Client
    container: Container
    clock: FixedClock

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return self.client.http.post(path, headers=headers or SERVER, body=raw)

    def get(self, path: str, headers: dict[str, str] | None = None) -> Any:
        return self.client.http.get(path, headers=headers or ADMIN)

    def admin(self, path: str, body: Any, headers: dict[str, str] | None = None) -> Any:
        return self.post(path, body, headers or ADMIN)

    def sent(self) -> list[tuple[str, str, str | None, dict[str, Any] | None, str | None]]:
        backend = sns_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]
        return list(backend.topics[self.container.settings.topic_arn].sent_notifications)

    def check(self, headers: dict[str, str] | None = None, /, **body: Any) -> Any:
        return self.post("/v1/check", body, headers)

    def token(
        self, tenant: str, role: str, principals: tuple[str, ...] = ()
    ) -> tuple[str, dict[str, str]]:
        token_id, token = new_token()
        record = TokenRecord(
            token_id, hash_secret(token), tenant, role, "test", self.clock(), None, principals
        )
        self.container.tokens.put(record)
        return token_id, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def make_container(settings: Settings, clock: FixedClock) -> Container:
    return Container(settings=settings, clock=clock)


@contextmanager
def running_api(clock: FixedClock, backend: str, **overrides: object) -> Iterator[Api]:
    with mock_aws():
        topic = boto3.client("sns").create_topic(Name="alerts")["TopicArn"]
        prefix = f"a{uuid.uuid4().hex[:8]}"
        settings = fresh_settings(prefix, topic_arn=topic, backend=backend, **overrides)
        if backend == "dynamodb":
            provisioned(client_for(None), settings)
        container = make_container(settings, clock)
        app_module.reset_dependencies(container)
        try:
            with Client(app_module.app, stage_name="local", project_dir=str(ROOT)) as client:
                yield Api(client, container, clock)
        finally:
            app_module.reset_dependencies(None)


@pytest.fixture
def api(clock: FixedClock) -> Iterator[Api]:
    """The API on the memory backend (decision logic); SNS is moto's."""
    with running_api(clock, "memory") as api:
        yield api


@pytest.fixture
def dynamo_api(clock: FixedClock) -> Iterator[Api]:
    """The API on moto's DynamoDB: for store faults and what only a real store shows."""
    with running_api(clock, "dynamodb") as api:
        yield api


def body(response: Any) -> Any:
    return json.loads(response.body)
