"""Fixtures shared by every test layer."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

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
# Session fixtures every worker may start for itself without grouping tests by them.
PER_WORKER_FIXTURES = {"dynalite_endpoint"}


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


def _shared_setup(item: pytest.Item) -> str | None:
    """The group of tests that share this test's started servers or built artefacts: its
    directory if it uses a session fixture of ours, its module if a module fixture, else
    None. dynalite is left out: one per worker is cheap, and most storage tests use it."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    module, directory = None, None
    for name, definitions in info.name2fixturedefs.items():
        ours = [d for d in definitions if d.baseid.startswith("tests")]
        if not ours or name in PER_WORKER_FIXTURES:
            continue
        scope = ours[-1].scope
        if scope in ("session", "package"):
            directory = ours[-1].baseid
        elif scope == "module":
            module = item.path.relative_to(TESTS.parent).as_posix()
    return directory or module


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks every test by what it needs, so `-m "not e2e"` and `make unit` mean what they
    say whether or not a module remembered to mark itself; and keeps the tests that share
    a started server on one xdist worker (`--dist loadgroup`), so it starts once, while
    the other tests are balanced one by one."""
    for item in items:
        layer = item.path.relative_to(TESTS).parts[0]
        if layer in E2E_LAYERS:
            item.add_marker(pytest.mark.e2e)
        if layer == "browser":
            item.add_marker(pytest.mark.browser)
        for backend in _backends(item):
            item.add_marker(getattr(pytest.mark, backend))
        group = _shared_setup(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


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
