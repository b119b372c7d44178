"""The policy loader refuses every policy that could not work, with a ConfigurationError
that names the problem and the file: never another exception."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import MAX_CATEGORIES, MAX_LIMIT, load_policy, parse_policy

DOC: dict[str, Any] = {
    "version": 1,
    "categories": {
        "read": {"limit": 200},
        "write": {"limit": 15, "principal": {"limit": 100, "window": "24h"}},
    },
    "rules": [{"pattern": "delete_*", "category": "write"}],
}


def _many_categories(doc: dict[str, Any]) -> None:
    for i in range(MAX_CATEGORIES):
        doc["categories"][f"c{i}"] = {"limit": 5}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        # Beyond what DynamoDB stores exactly and JSON clients read back exactly.
        (lambda d: d["categories"]["read"].update(limit=10**40), "limit"),
        (lambda d: d["categories"]["read"].update(max_limit=MAX_LIMIT + 1), "max_limit"),
        (lambda d: d["categories"]["write"]["principal"].update(limit=10**40), "limit"),
        (lambda d: d.update(suspend_after_refusals=10**40), "suspend_after_refusals"),
        # Every session start would clear more counters than one update expression holds.
        (_many_categories, "at most"),
        (lambda d: d["rules"].append({"tools": ["x"], "category": ["write"]}), "category"),
        (lambda d: d["rules"].append({"tools": ["x"], "category": {"a": 1}}), "category"),
        (lambda d: d.update(version=True), "version"),
        (lambda d: d.update(version=1.0), "version"),
        (lambda d: d["categories"]["write"]["principal"].update(limit=10), "below"),
        (lambda d: d["categories"]["read"].update(lease_max=500), "lease_max"),
        (lambda d: d.update(suspend_after_refusals=0), "suspend_after_refusals"),
    ],
)
def test_impossible_policies_are_refused_by_name(mutate: Any, message: str) -> None:
    doc = copy.deepcopy(DOC)
    mutate(doc)
    with pytest.raises(ConfigurationError, match=message):
        parse_policy(doc)


def test_the_limits_at_the_bound_still_load() -> None:
    doc = copy.deepcopy(DOC)
    doc["categories"]["read"].update(limit=MAX_LIMIT, max_limit=MAX_LIMIT)
    for i in range(MAX_CATEGORIES - 2):
        doc["categories"][f"c{i}"] = {"limit": 5}
    assert parse_policy(doc).categories["read"].max_limit == MAX_LIMIT


@pytest.mark.parametrize(
    "content",
    [
        b'{"version": 1, "categories": {"caf\xe9": {"limit": 1}}}',  # not UTF-8
        b"[" * 100_000 + b"]" * 100_000,  # nested past the parser's recursion limit
        b"[1, 2]",
        b"",
    ],
)
def test_an_unreadable_policy_file_is_a_configuration_error_naming_it(
    tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "odd.json"
    path.write_bytes(content)
    with pytest.raises(ConfigurationError, match=r"odd\.json"):
        load_policy(str(path))


def test_a_policy_error_names_the_file(tmp_path: Path) -> None:
    doc = copy.deepcopy(DOC)
    doc["categories"]["write"]["principal"]["limit"] = 10
    path = tmp_path / "tight.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ConfigurationError, match=r"tight\.json.*below"):
        load_policy(str(path))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
NAMES = st.sampled_from(["read", "write", "x", "Bad", ""])
KEYS = st.sampled_from(
    ["limit", "max_limit", "notify", "principal", "tenant", "lease", "lease_max", "lease_seconds"]
)


RULE_VALUES = (
    JSON | st.sampled_from(["read", "write", "*"]) | st.lists(st.text(max_size=5), max_size=3)
)


@settings(max_examples=300, deadline=None)
@given(
    base=st.booleans(),
    categories=st.dictionaries(NAMES, st.dictionaries(KEYS, JSON) | JSON, max_size=3),
    rules=st.lists(st.dictionaries(st.sampled_from(["tools", "pattern", "category"]), RULE_VALUES)),
    extra=st.dictionaries(st.sampled_from(["version", "suspend_after_refusals"]), JSON),
)
def test_any_document_loads_or_is_a_configuration_error(
    base: bool, categories: Any, rules: Any, extra: Any
) -> None:
    if base:  # a valid start, so that the rules and the keys after them are reached too
        categories = {**copy.deepcopy(DOC["categories"]), **categories}
    document = {"version": 1, "categories": categories, "rules": rules, **extra}
    try:
        parse_policy(document)
    except ConfigurationError as exc:
        assert "\n" not in str(exc)
