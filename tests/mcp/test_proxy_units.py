"""The proxy weighs calls by the policy's `"units_from"` (issue 22 item 2): the length of
the named list argument, else 1; the service's policy parser accepts the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp_quota_client.proxy import costs_from_policy, parse_args, start_line

from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import POLICY_DIR, parse_policy

RULE = {"tools": ["delete_tags"], "category": "write", "units_from": "tags"}


def _policy(*rules: object) -> dict[str, object]:
    document: dict[str, object] = json.loads((POLICY_DIR / "default.json").read_text())
    document["rules"] = list(rules)
    return document


def test_a_rule_weighs_its_tools_by_the_list_length(tmp_path: Path) -> None:
    document = _policy(RULE, {"pattern": "delete_*", "category": "write"})
    assert parse_policy(document).rules[0].units_from == "tags"
    path = tmp_path / "policy.json"
    path.write_text(json.dumps(document))
    settings = parse_args(["--upstream-url", "http://127.0.0.1:9/mcp", "--policy", str(path)])
    cost = settings.costs["delete_tags"]
    assert cost({"tags": ["a", "b", "c"]}) == 3
    assert cost({"tags": "a"}) == 1 and cost({}) == 1
    assert set(settings.costs) == {"delete_tags"}


def test_without_units_from_nothing_is_weighed() -> None:
    assert costs_from_policy(_policy({"tools": ["delete_tags"], "category": "write"})) == {}


def test_a_bad_units_from_is_refused_at_start_up() -> None:
    with pytest.raises(ConfigurationError, match="units_from"):
        parse_policy(_policy({**RULE, "units_from": 3}))


def test_an_unreadable_policy_stops_the_proxy_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--upstream-url", "http://127.0.0.1:9/mcp", "--policy", str(tmp_path / "no")])


def test_the_start_line_says_where_it_listens_the_upstream_and_the_service() -> None:
    """Defect class: a proxy that printed nothing at start, not even where it listens."""
    settings = parse_args(["--port", "8010", "--upstream-command", "node server.mjs"])
    line = start_line(settings, "http://127.0.0.1:8000")
    assert line == (
        "mcp-quota-proxy: listening on http://127.0.0.1:8010/mcp, upstream node server.mjs, "
        "quota service http://127.0.0.1:8000"
    )
