"""openapi.yaml is the service's published contract: it names every route the app serves
once app.py has registered its blueprints (and no other), and schemathesis, generating
requests from it against the service as `make run` starts it, finds no 5xx and no
response that breaks the document."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import app as app_module
from tests.support import ROOT, running_service

SPEC = ROOT / "openapi.yaml"
METHODS = {"get", "head", "post", "put", "patch", "delete"}
ADMIN = {"Authorization": "Bearer dev-admin-token"}

# What the contract promises: no 5xx, and every answer as documented. (Not that every
# schema-valid body is accepted: a grant ending in the past is well-formed JSON but a 400.)
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]
SCHEMA = schemathesis.openapi.from_path(SPEC)
OPERATIONS = [cast(Any, result).ok() for result in SCHEMA.get_all_operations()]


def spec_routes() -> set[tuple[str, str]]:
    document: dict[str, Any] = SCHEMA.raw_schema
    return {
        (path, method.upper())
        for path, item in document["paths"].items()
        for method in item
        if method in METHODS
    }


def app_routes() -> set[tuple[str, str]]:
    return {(path, method) for path, entries in app_module.app.routes.items() for method in entries}


def test_every_route_is_in_the_spec_and_every_spec_path_is_a_route() -> None:
    assert spec_routes() == app_routes()


def test_the_spec_marks_only_health_as_public() -> None:
    document: dict[str, Any] = SCHEMA.raw_schema
    public = {
        (path, method)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS and operation.get("security") == []
    }
    authorized = {
        (path, method.lower())
        for path, entries in app_module.app.routes.items()
        for method, entry in entries.items()
        if entry.authorizer is None
    }
    # Besides /health: the console's static files and its sign-in configuration (the page
    # asks for a token itself) and the email's links (a signed, single-use token in the
    # path is their authority).
    assert (
        public
        == authorized
        == {
            ("/health", "get"),
            ("/console", "get"),
            ("/console", "head"),
            ("/console/{name}", "get"),
            ("/console/{name}", "head"),
            ("/v1/console-config", "get"),
            ("/favicon.ico", "get"),
            ("/favicon.ico", "head"),
            ("/actions/{token}", "get"),
            ("/actions/{token}", "post"),
        }
    )


@pytest.fixture(scope="module")
def service_url() -> Iterator[str]:
    with running_service() as url:
        yield url


def marked(operation: Any) -> Any:
    # This suite found grants before year 1000 rendered as "78-08-07T08:13:54Z": times
    # are now bounded to 2000-2999 and rendered with a padded year.
    return pytest.param(operation, id=operation.label)


@pytest.mark.e2e
@pytest.mark.parametrize("operation", [marked(op) for op in OPERATIONS])
def test_generated_requests_get_no_5xx_and_conform(service_url: str, operation: Any) -> None:
    @given(data=st.data())
    @settings(
        max_examples=12,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(data: st.DataObject) -> None:
        case = data.draw(operation.as_strategy())
        case.call_and_validate(base_url=service_url, headers=ADMIN, checks=CHECKS)

    run()
