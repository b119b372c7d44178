"""Issue 11, item 1: scopes and windows in the policy, validated at start-up."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.quota.core import Scope
from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import load_policy, parse_policy
from tests.support import T0


def policy_with(write: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "categories": {"read": {"limit": 200}, "write": {"limit": 15, **write}},
        **top,
    }


def test_the_default_policy_has_the_documented_scopes() -> None:
    policy = load_policy("default.json")
    read, write = policy.categories["read"], policy.categories["write"]
    assert read.limit == 200 and read.windows == ()  # reads stay at one request
    assert write.limit == 15
    assert write.principal is not None and write.tenant is not None
    assert (write.principal.limit, write.principal.window_seconds) == (100, 86_400)
    assert (write.tenant.limit, write.tenant.window_seconds) == (1000, 3600)
    assert [w.scope for w in write.windows] == [Scope.PRINCIPAL, Scope.TENANT]
    assert policy.suspend_after_refusals == 50


def test_windows_are_fixed_and_aligned_to_utc() -> None:
    policy = parse_policy(policy_with({"principal": {"limit": 100, "window": "24h"}}))
    window = policy.categories["write"].principal
    assert window is not None
    assert window.window_start_ms(T0) == T0 - 12 * 3_600_000  # T0 is 12:00 UTC
    assert window.window_end_ms(T0) == T0 + 12 * 3_600_000


@pytest.mark.parametrize(
    ("write", "message"),
    [
        ({"principal": {"limit": 100}}, "exactly limit and window"),
        ({"principal": {"limit": 100, "window": "1 day"}}, "must look like"),
        ({"principal": {"limit": 100, "window": "7h"}}, "divide a day"),
        ({"principal": {"limit": 100, "window": "30s"}}, "from 1m to 31d"),
        ({"principal": {"limit": 100, "window": "40d"}}, "from 1m to 31d"),
        ({"principal": {"limit": 0, "window": "1h"}}, "integer >= 1"),
        ({"principal": {"limit": 10, "window": "1h"}}, "below the scope inside it"),
        (
            {"tenant": {"limit": 50, "window": "1h"}, "principal": {"limit": 100, "window": "1h"}},
            "below the scope inside it",
        ),
        ({"session": {"limit": 3}}, "unknown keys"),
        ({"principal": [100, "24h"]}, "exactly limit and window"),
    ],
)
def test_nonsense_scopes_fail_at_start_up_with_a_clear_error(
    write: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_policy(policy_with(write))


@pytest.mark.parametrize("value", [0, -1, "50", True])
def test_suspend_after_refusals_must_be_a_positive_integer(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="suspend_after_refusals"):
        parse_policy(policy_with({}, suspend_after_refusals=value))
