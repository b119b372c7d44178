"""`make demo` fits on one screen: the story, what the administrator got, where to look."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def output() -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_QUOTA_")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        timeout=300,  # a cap on a whole run of the service, not a synchronisation
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_demo_prints_at_most_60_lines(output: str) -> None:
    lines = output.rstrip("\n").splitlines()
    assert len(lines) <= 60, output


def test_it_says_what_the_agent_did_and_was_told(output: str) -> None:
    assert re.search(r"called delete_tag 400 times", output)
    assert re.search(r"15 ran .*385 were refused", output)
    # The quota refusal first, then what the agent saw once its principal was suspended.
    assert "from call 16 on (quota_exceeded):" in output
    quota = output.index("The tool 'delete_tag' was NOT run")
    suspended = output.index("principal_suspended")
    assert quota < suspended


def test_it_lists_the_emails_subjects_and_links_and_names_the_file(output: str) -> None:
    subjects = re.findall(r"Subject: \[mcp-quota\].*", output)
    assert len(subjects) == 2
    assert "write quota" in subjects[0] and "suspended" in subjects[1]
    assert re.search(r"http://127\.0\.0\.1:\d+/actions/\S+", output)
    assert re.search(r"http://127\.0\.0\.1:\d+/console#/session/incident-\w+", output)
    [named] = re.findall(r"full e-?mails?[^:]*: (\S+)", output)
    emails = Path(named).read_text()
    assert emails.count("Subject:") == 2 and "Last calls of the session" in emails
    assert "Last calls of the session" not in output


def test_it_ends_with_the_commands_to_look_further(output: str) -> None:
    assert "mcp-quota session show" in output
    assert "mcp-quota audit --session" in output
    assert "mcp-quota principal" in output
