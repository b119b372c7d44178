"""The loop breaker (issue 22 item 3) as a rule: its clause on snapshots, its rendering,
its policy key and its refusal's words."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.check.repeats import repeated, with_repeat
from chalicelib.quota import rules
from chalicelib.quota.answers import Refused
from chalicelib.quota.core import (
    Attempt,
    CallRecord,
    RefusalReason,
    SessionKey,
    SessionSnapshot,
    Verdict,
    repeat_key,
)
from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import POLICY_DIR, parse_policy
from chalicelib.storage.dynamodb.conditions import render
from tests.support import T0

HOUR = 3_600_000
TEN_MINUTES = 600_000
DIGEST = "ab" * 32


def _policy(repeat: object) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((POLICY_DIR / "default.json").read_text())
    document["categories"]["write"]["repeat"] = repeat
    return document


def attempt(call_id: str | None = None, digest: str = DIGEST, now: int = T0) -> Attempt:
    plain = Attempt(
        SessionKey("demo", "s1"), "delete_tag", "write", 15, now, HOUR, "chk1", None, call_id
    )
    category = parse_policy(_policy({"limit": 3, "window": "10m"})).categories["write"]
    return with_repeat(plain, category, digest)


def test_the_default_policy_breaks_loops_of_writes_only() -> None:
    categories = parse_policy(json.loads((POLICY_DIR / "default.json").read_text())).categories
    write = categories["write"].repeat
    assert write is not None and (write.limit, write.window_seconds) == (3, 600)
    assert categories["read"].repeat is None


@pytest.mark.parametrize(
    "repeat",
    [
        3,
        {"limit": 3},
        {"limit": 0, "window": "10m"},
        {"limit": 3, "window": "7x"},
        {"limit": 101, "window": "1h"},
    ],
)
def test_a_bad_repeat_key_is_refused_at_start_up(repeat: object) -> None:
    with pytest.raises(ConfigurationError, match="repeat"):
        parse_policy(_policy(repeat))


def test_the_nth_plus_one_same_call_in_the_window_is_a_repeat() -> None:
    a = attempt()
    assert a.repeat_key == repeat_key("delete_tag", DIGEST, TEN_MINUTES, T0)
    assert a.repeat_key is not None
    twice = SessionSnapshot(T0, T0, counts={"write": 2}, repeats={a.repeat_key: 2})
    assert rules.admits(twice, a)
    thrice = replace(twice, repeats={a.repeat_key: 3})
    assert not rules.admits(thrice, a)
    assert rules.explain_refusal(thrice, a) is Verdict.REPEATED
    # Other arguments, another tool: another key; no digest or no `repeat`: no clause.
    assert rules.admits(thrice, attempt(digest="cd" * 32))
    assert rules.admits(thrice, replace(a, repeat_key=None))


def test_a_retry_of_a_counted_call_id_is_a_duplicate_not_a_repeat() -> None:
    a = attempt(call_id="c1")
    assert a.repeat_key is not None
    counted = CallRecord(T0, "write", "delete_tag", True, call_id="c1")
    seen = SessionSnapshot(T0, T0, counts={"write": 3}, calls=(counted,), repeats={a.repeat_key: 3})
    assert rules.explain_refusal(seen, a) is Verdict.DUPLICATE


def test_a_repeat_is_told_before_the_limit() -> None:
    a = attempt()
    assert a.repeat_key is not None
    both = SessionSnapshot(T0, T0, counts={"write": 15}, repeats={a.repeat_key: 3})
    assert rules.explain_refusal(both, a) is Verdict.REPEATED


def test_the_clause_renders_as_one_aliased_comparison() -> None:
    rendered = render(rules.session_consume(attempt()))
    assert "NOT #q >= :qlimit" in rendered.expression
    assert rendered.names["#q"].endswith(attempt().repeat_key or "?")
    assert rendered.values[":qlimit"] == {"N": "3"}


def test_the_refusal_says_what_was_repeated_and_to_stop() -> None:
    a = attempt()
    base = Refused("s1", "delete_tag", "write", 3, 15, T0, T0 + HOUR, RefusalReason.QUOTA_EXCEEDED)
    refusal = repeated(base, a)
    assert refusal.reason is RefusalReason.REPEATED_CALL
    assert refusal.message == (
        "The tool 'delete_tag' was NOT run: it was already called with the same arguments "
        "3 times in this 10-minute window, which ends at 12:10 UTC. Repeating it will not "
        "help: stop and tell the user."
    )
    assert 0 < refusal.retry_after_seconds <= 600


def test_the_refusal_names_the_fixed_window_not_the_last_minutes() -> None:
    # Windows align to UTC: at 12:07 the window holds the calls since 12:00, not since
    # 11:57, and it ends at 12:10 whatever the time of the first call.
    now = T0 + 7 * 60_000
    base = Refused(
        "s1", "delete_tag", "write", 3, 15, now, now + HOUR, RefusalReason.QUOTA_EXCEEDED
    )
    message = repeated(base, attempt(now=now)).message
    assert "3 times in this 10-minute window, which ends at 12:10 UTC." in message
    assert "in the last" not in message


def test_a_window_of_days_names_the_day_it_ends() -> None:
    plain = Attempt(
        SessionKey("demo", "s1"), "delete_tag", "write", 15, T0, HOUR, "chk1", None, None
    )
    category = parse_policy(_policy({"limit": 3, "window": "2d"})).categories["write"]
    a = with_repeat(plain, category, DIGEST)
    base = Refused("s1", "delete_tag", "write", 3, 15, T0, T0 + HOUR, RefusalReason.QUOTA_EXCEEDED)
    assert "3 times in this 2-day window, which ends at 2026-12-03 00:00 UTC." in (
        repeated(base, a).message
    )
