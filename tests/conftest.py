"""Fixtures shared by every test layer."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import mock_aws
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

from chalicelib.quota.policy import load_policy
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
    share_botocore_data,
)

fake_aws_env()
share_botocore_data()

TESTS = Path(__file__).resolve().parent
# The layers whose every test starts the service as a user does, spoken to over HTTP.
E2E_LAYERS = {"e2e", "browser"}
BACKENDS = ("memory", "moto", "dynalite")
# Fixtures that put a test on one backend without a parameter saying so.
BACKEND_FIXTURES = {
    "dynalite_endpoint": "dynalite",
    "service_on_dynalite": "dynalite",  # a dynalite of its own, to freeze
    "moto_aws": "moto",
    "dynamo_api": "moto",
}
# The API layer's parameter for its settings' `backend="dynamodb"`: moto in process.
PARAM_BACKENDS = {"dynamodb": "moto"}
# Directories whose modules share a package or session fixture (the browser's service
# and Chromium, the packaged zip): with -n, each runs whole on one worker.
SHARED_DIRECTORIES = ("tests/browser", "tests/deploy")


def _backends(item: pytest.Item) -> set[str]:
    """The storage backends a collected test runs on, from its parameters and fixtures."""
    fixtures = getattr(item, "fixturenames", ())
    found = {name for fixture, name in BACKEND_FIXTURES.items() if fixture in fixtures}
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for value in callspec.params.values():
            if isinstance(value, str) and PARAM_BACKENDS.get(value, value) in BACKENDS:
                found.add(PARAM_BACKENDS.get(value, value))
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test by what it needs, so `-m "not e2e"` and `make unit` mean what they
    say whether or not a module remembered to mark itself."""
    for item in items:
        layer = item.path.relative_to(TESTS).parts[0]
        if layer in E2E_LAYERS:
            item.add_marker(pytest.mark.e2e)
        if layer == "browser":
            item.add_marker(pytest.mark.browser)
        for backend in _backends(item):
            item.add_marker(getattr(pytest.mark, backend))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--dist loadfile` (addopts), a module is one unit of work, so a module fixture
    (a started service, an MCP stack) starts once, not on both workers; and each of
    SHARED_DIRECTORIES is one unit. The units are spread over the workers as they free up.

    (`--dist loadgroup` would say this with marks, but it groups nothing under pytest 9.2:
    pytest-xdist issue 1386.)"""
    if config.getvalue("dist") != "loadfile":
        return None

    class ByModule(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return next((d for d in SHARED_DIRECTORIES if module.startswith(f"{d}/")), module)

    return ByModule(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A module that skips itself as a whole fails instead: a missing prerequisite must
    be seen, not counted as nothing to run."""
    report = yield
    if isinstance(collector, pytest.Module) and report.skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = (
            f"{collector.nodeid} skipped itself as a whole ({reason}). A missing "
            "prerequisite fails the run: install it (`make install`) or fix the module."
        )
    return report


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
