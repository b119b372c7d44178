"""Exactly-once writes, the pure parts: which categories replay, what is kept of a result,
what a store did, and what a duplicate is answered with."""

from __future__ import annotations

import json

import pytest

from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import POLICY_DIR, parse_policy
from chalicelib.quota.results import (
    MAX_KEPT_BYTES,
    ReplayState,
    ResultKey,
    StoreOutcome,
    answers_past_duplicates,
    keep_ms,
    kept,
    outcome,
    replay_of,
)

KEY = ResultKey("demo", "s", "c")
DEFAULT = json.loads((POLICY_DIR / "default.json").read_text())


def policy(**write: object) -> dict[str, object]:
    categories = {"read": {"limit": 5}, "write": {"limit": 5, **write}, "pay": {"limit": 2}}
    return {"version": 1, "categories": categories}


def test_writes_replay_and_reads_do_not_by_default() -> None:
    """Defect class: a read's retry answered with a stale result, or a write's run twice."""
    parsed = parse_policy(policy())
    assert parsed.categories["write"].replay and parsed.categories["pay"].replay
    assert not parsed.categories["read"].replay
    default = parse_policy(DEFAULT)
    assert default.categories["write"].replay and not default.categories["read"].replay
    assert not parse_policy(policy(replay=False)).categories["write"].replay


def test_replay_must_be_a_boolean() -> None:
    with pytest.raises(ConfigurationError, match="replay must be true or false"):
        parse_policy(policy(replay="yes"))


def test_a_result_over_64_kib_keeps_only_digest_and_size() -> None:
    """Defect class: a large result stored whole (past the item limit) or cut silently."""
    small = kept(KEY, "t", {"text": "x"}, 1000, 60_000)
    assert not small.truncated and small.expires_ms == 61_000
    big = kept(KEY, "t", {"text": "x" * MAX_KEPT_BYTES}, 1000, 60_000)
    assert big.truncated and big.size > MAX_KEPT_BYTES and len(big.digest) == 64
    replay = replay_of(big, 2000)
    assert replay.state is ReplayState.NOT_KEPT and "NOT run again" in replay.to_json()["message"]


def test_the_first_store_wins() -> None:
    first = kept(KEY, "t", {"a": 1}, 0, 10)
    assert outcome(first, None) is StoreOutcome.STORED
    assert outcome(kept(KEY, "t", {"a": 1}, 5, 10), first) is StoreOutcome.SAME
    assert outcome(kept(KEY, "t", {"a": 2}, 5, 10), first) is StoreOutcome.CONFLICT


def test_an_expired_or_missing_result_is_still_running() -> None:
    """Defect class: a result past its session's life replayed because TTL lagged."""
    stored = kept(KEY, "t", {"a": 1}, 0, 10)
    assert replay_of(stored, 9).to_json() == {"state": "stored", "result": {"a": 1}}
    assert replay_of(stored, 10).state is ReplayState.RUNNING
    assert replay_of(None, 0).to_json() == {"state": "running"}


def test_a_result_outlives_its_duplicates_window() -> None:
    """Defect class: a short idle timeout drops a result its duplicates still ask for."""
    assert keep_ms(1000) == 60_000 and keep_ms(3_600_000) == 3_600_000


def test_a_copy_past_its_duplicates_is_answered_only_from_a_live_kept_result() -> None:
    """Defect class: a patient retry of a write (past MAX_REPLAYS copies) runs it again,
    or a loop reusing one id runs uncounted where no result is kept."""
    small = kept(KEY, "delete_tag", {"content": []}, 1_000, 60_000)
    big = kept(KEY, "delete_tag", {"content": [{"text": "x" * MAX_KEPT_BYTES}]}, 1_000, 60_000)
    assert answers_past_duplicates(True, small, 2_000)
    assert answers_past_duplicates(True, big, 2_000)  # its digest says it ran: no second run
    assert not answers_past_duplicates(True, None, 2_000)
    assert not answers_past_duplicates(True, small, 61_000)  # expired (TTL lags)
    assert not answers_past_duplicates(False, small, 2_000)  # reads are untouched
