"""Fixtures for the CLI tests: a hermetic environment and the fake admin API."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from admin_cli.main import main
from tests.cli.fake_api import FakeAdminApi, running_fake

ADMIN_TOKEN = "test-admin-token"

# Stored text an attacker (or a bug) could put in a reason, name or tool: a terminal title
# change, screen clear, carriage return, 8-bit CSI, bidi override, lone surrogate, NUL, DEL.
HOSTILE_TEXT = [
    "\x1b]0;pwned\x07",
    "\x1b[2J",
    "over\rwrite",
    "\x9b31m",
    "\u202eevil",
    "\u2066isolate",
    "\ud800",
    "nul\x00",
    "del\x7f",
    "two\nlines",
    "tag\U000e0001",
]


def unsafe_characters(text: str) -> list[str]:
    """Characters a terminal may obey or fail to encode (line breaks the CLI writes aside)."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs")]


@pytest.fixture(autouse=True)
def _no_ambient_cli_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # An operator's own MCP_QUOTA_* or table settings must not leak into the tests.
    for name in ("MCP_QUOTA_URL", "MCP_QUOTA_TOKEN", "MCP_QUOTA_ADMIN_TOKEN", "QUOTA_TOKENS_TABLE"):
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
