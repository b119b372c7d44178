"""Issue 31 item 6: the docs search finds every proxy flag and every policy key. MkDocs
indexes text and tables, so each must appear, in backticks, in a table row of docs/."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_quota_client.proxy import parser

DOCS = Path(__file__).resolve().parents[2] / "docs"
POLICY_KEYS = (
    # the document
    "version", "categories", "rules", "suspend_after_refusals", "enforce",
    # a category
    "limit", "max_limit", "notify", "description", "principal", "tenant", "lease",
    "lease_max", "lease_seconds", "repeat",
    # a principal/tenant window or a repeat limit
    "window", "shards",
    # a rule
    "tools", "pattern", "category", "units_from",
)  # fmt: skip


def _table_rows() -> str:
    rows = [
        line
        for page in sorted(DOCS.glob("*.md"))
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.lstrip().startswith("|")
    ]
    return "\n".join(rows)


ROWS = _table_rows()
FLAGS = sorted(
    option
    for action in parser()._actions
    for option in action.option_strings
    if option.startswith("--") and option != "--help"
)


@pytest.mark.parametrize("flag", FLAGS)
def test_each_proxy_flag_is_in_a_docs_table(flag: str) -> None:
    """Defect class: a flag the docs search cannot find (`--policy` found nothing)."""
    assert f"`{flag}" in ROWS, f"{flag} is in no table of docs/"


@pytest.mark.parametrize("key", POLICY_KEYS)
def test_each_policy_key_is_in_a_docs_table(key: str) -> None:
    """Defect class: a policy key the docs search cannot find (`units_from` found nothing)."""
    assert f"`{key}`" in ROWS, f"policy key {key} is in no table of docs/"
