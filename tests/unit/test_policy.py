from __future__ import annotations

import copy
from typing import Any

import pytest

from chalicelib.quota import approvals
from chalicelib.quota import policy as policy_module
from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import load_policy, parse_policy

DOC: dict[str, Any] = {
    "version": 1,
    "categories": {
        "read": {"limit": 200},
        "write": {"limit": 15, "notify": True},
        "admin": {"limit": 2},
    },
    "rules": [
        {"pattern": "delete_*", "category": "admin"},
        {"tools": ["delete_draft"], "category": "write"},
        {"pattern": "search_*", "category": "read"},
    ],
}


def test_default_policy_has_the_documented_budgets() -> None:
    policy = load_policy("default.json")
    assert policy.categories["read"].limit == 200
    assert policy.categories["write"].limit == 15
    assert policy.categories["write"].notify and not policy.categories["read"].notify


def test_precedence_rule_then_request_then_annotations_then_most_restrictive() -> None:
    policy = parse_policy(DOC)
    assert policy.classify("search_x", "write", False).category.name == "read"
    assert policy.classify("search_x").source == "rule"
    assert policy.classify("other", "read", False).category.name == "read"
    assert policy.classify("other", None, True).category.name == "read"
    assert policy.classify("other", None, False).category.name == "write"
    unknown = policy.classify("other")
    assert unknown.category.name == "admin" and unknown.source == "default"


def test_exact_names_win_over_patterns_whatever_their_order() -> None:
    policy = parse_policy(DOC)
    assert policy.classify("delete_draft").category.name == "write"
    assert policy.classify("delete_tag").category.name == "admin"


def test_unknown_tool_never_lands_in_the_generous_budget() -> None:
    policy = load_policy("default.json")
    assert policy.classify("frobnicate").category.name == "write"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(version=2), "version"),
        (lambda d: d["categories"].pop("read"), "'read'"),
        (lambda d: d["categories"]["read"].update(limit=0), "limit"),
        (lambda d: d["categories"]["read"].update(limit=True), "limit"),
        (lambda d: d["categories"]["read"].update(max_limit=1), "max_limit"),
        (lambda d: d["categories"]["read"].update(colour="red"), "unknown keys"),
        (lambda d: d["categories"].update({"Bad Name": {"limit": 1}}), "category name"),
        (lambda d: d["rules"].append({"pattern": "x", "category": "nope"}), "unknown category"),
        (lambda d: d["rules"].append({"category": "read"}), "exactly one"),
    ],
)
def test_invalid_policies_fail_at_start_with_a_named_reason(mutate: Any, message: str) -> None:
    doc = copy.deepcopy(DOC)
    mutate(doc)
    with pytest.raises(ConfigurationError, match=message):
        parse_policy(doc)


def test_missing_policy_file_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_policy("no-such-policy.json")


def test_an_approval_rule_and_its_seconds_are_parsed() -> None:
    """Issue 32: `approval` on a rule, `approval_seconds` on the policy, both checked."""
    base = {"version": 1, "categories": {"read": {"limit": 5}, "write": {"limit": 2}}}
    rules = [
        {"tools": ["drop_table"], "category": "write", "approval": True},
        {"pattern": "drop_*", "category": "write"},
    ]
    policy = policy_module.parse_policy({**base, "rules": rules})
    assert policy.needs_approval("drop_table")
    assert not policy.needs_approval("drop_index")  # its rule does not ask
    assert not policy.needs_approval("unknown")
    assert policy.approval_seconds == approvals.DEFAULT_APPROVAL_SECONDS
    assert policy_module.parse_policy({**base, "approval_seconds": 60}).approval_seconds == 60
    bad_rule = [{"tools": ["x"], "category": "write", "approval": "yes"}]
    for document in ({**base, "rules": bad_rule}, {**base, "approval_seconds": 0}):
        try:
            policy_module.parse_policy(document)
        except ConfigurationError:
            continue
        raise AssertionError(f"accepted {document}")
