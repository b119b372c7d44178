"""The MRTR envelope: a call id comes back only from a genuine, unexpired state issued
to the same caller for the same arguments."""

from __future__ import annotations

import pytest
from mcp_quota_client.call_state import CallStateSealer, OpenedState

from chalicelib.quota.errors import ConfigurationError
from chalicelib.quota.policy import SessionFrom, load_policy, parse_policy

KEY = b"k" * 32


def sealer(now: list[float]) -> CallStateSealer:
    return CallStateSealer(KEY, ttl_seconds=600, clock=lambda: now[0])


def test_a_sealed_state_opens_for_its_caller_and_arguments_only() -> None:
    """Defect class: a client-returned value trusted without binding (forged call ids)."""
    now = [1000.0]
    states = sealer(now)
    token = states.seal("gen-1", "inner", "alice", "d1")

    assert states.open(token, "alice", "d1") == OpenedState("gen-1", "inner")
    assert states.open(token, "bob", "d1") is None
    assert states.open(token, "alice", "d2") is None
    assert states.open(token[:-2] + "xx", "alice", "d1") is None
    assert CallStateSealer(b"o" * 32).open(token, "alice", "d1") is None
    now[0] += 601
    assert states.open(token, "alice", "d1") is None


def test_a_state_without_the_tools_own_opens_to_none_inside() -> None:
    states = sealer([0.0])
    assert states.open(states.seal("c", None, "-", None), "-", None) == OpenedState("c", None)


def test_a_short_shared_key_is_refused() -> None:
    with pytest.raises(ValueError, match="MCP_QUOTA_STATE_KEY"):
        CallStateSealer.from_env({"MCP_QUOTA_STATE_KEY": "short"})


def test_the_policy_names_what_an_unnamed_session_is_keyed_on() -> None:
    base = {"version": 1, "categories": {"read": {"limit": 5}, "write": {"limit": 2}}}
    assert load_policy("default.json").session_from is SessionFrom.CALLER
    assert parse_policy({**base, "session_from": "transport"}).session_from is (
        SessionFrom.TRANSPORT
    )
    with pytest.raises(ConfigurationError, match="session_from must be one of"):
        parse_policy({**base, "session_from": "connection"})
