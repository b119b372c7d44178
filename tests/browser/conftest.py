"""One service and one Chromium for every browser test (they use sessions and principals
of their own, so they need no fresh service). Package scope, not session: Playwright's
sync API keeps an event loop running in the main thread until it stops, and the anyio
tests that run after these on the same worker need the thread free."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect, sync_playwright

from tests.e2e.inbox import Stack, service_with_inbox

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

# An assertion waits until the page shows what it expects; Playwright's default of 5 s is
# short for Chromium beside a busy service on two shared cores. Actions already wait 30 s.
expect.set_options(timeout=30_000)


@pytest.fixture(scope="package")
def stack() -> Iterator[Stack]:
    with service_with_inbox() as started:
        yield started


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is missing: `make install` installs it")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()
