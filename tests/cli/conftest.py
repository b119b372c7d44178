"""Fixtures for the CLI tests: a hermetic environment and the fake admin API."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from admin_cli.main import main
from tests.cli.fake_api import FakeAdminApi, running_fake

ADMIN_TOKEN = "test-admin-token"


@pytest.fixture(autouse=True)
def _no_ambient_cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # An operator's own MCP_QUOTA_* or table settings must not leak into the tests.
    for name in ("MCP_QUOTA_URL", "MCP_QUOTA_TOKEN", "QUOTA_TOKENS_TABLE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def api() -> Iterator[FakeAdminApi]:
    with running_fake() as fake:
        yield fake


@dataclass(frozen=True)
class Run:
    """What one CLI invocation returned and printed."""

    code: int
    out: str
    err: str


class Cli:
    """Calls `main(argv)` in-process and captures its output."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    def __call__(self, *argv: str) -> Run:
        self._capsys.readouterr()
        code = main(list(argv))
        captured = self._capsys.readouterr()
        return Run(code, captured.out, captured.err)

    def admin(self, api: FakeAdminApi, *argv: str) -> Run:
        """Run an HTTP command against the fake with the admin token."""
        return self(*argv, "--url", api.url, "--token", ADMIN_TOKEN)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys)
