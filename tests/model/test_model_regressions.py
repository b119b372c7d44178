"""Sequences the model test found, kept as they ran: each failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.model.driver import open_backend
from tests.model.model import POLICY_DOCUMENT
from tests.model.test_model import QuotaMachine

# MODEL_RANDOM=1, 2026-12-05: the last check's refusal reached `suspend_after_refusals`
# while its suspension's write was throttled.
THROTTLED_SUSPENSION: list[tuple[str, dict[str, Any]]] = [
    (
        "check",
        {
            "args": "a",
            "call_id": "c2",
            "principal": "alice",
            "session": "s1",
            "tool": ("search_docs", None),
        },
    ),
    ("retry_last", {"how": "tool", "tool": ("update_page", None)}),
    ("principal_admin", {"action": "reset", "add": 2, "principal": "token:dev-server"}),
    ("session_admin", {"action": "raise", "add": 1, "category": "read", "session": "s2"}),
    ("lose_an_answer", {"index": 0}),
    ("lose_an_answer", {"index": 3}),
    (
        "unvouched_report",
        {
            "held": 4,
            "principal": "alice",
            "session": "s1",
            "ticket": None,
            "tool": ("update_page", None),
        },
    ),
    ("inject_fault", {"count": 2, "skip": 3}),
    ("principal_admin", {"action": "resume", "add": 2, "principal": "alice"}),
    ("session_admin", {"action": "lower", "add": 2, "category": "write", "session": "s3"}),
    ("lose_an_answer", {"index": 0}),
    ("session_admin", {"action": "suspend", "add": 1, "category": "write", "session": "s1"}),
    ("session_admin", {"action": "suspend", "add": 2, "category": "write", "session": "s2"}),
    ("mixed_run", {"calls": 5, "first": "write", "principal": "bob", "session": "s3"}),
    ("retry_last", {"how": "tool", "tool": ("get_page", None)}),
    ("session_admin", {"action": "lower", "add": 2, "category": "read", "session": "s3"}),
    ("lose_an_answer", {"index": 0}),
    (
        "check",
        {
            "args": None,
            "call_id": "c3",
            "principal": "alice",
            "session": "s3",
            "tool": ("misc_tool", "write"),
        },
    ),
    (
        "check",
        {
            "args": None,
            "call_id": None,
            "principal": "bob",
            "session": "s2",
            "tool": ("misc_tool", "read"),
        },
    ),
    (
        "unvouched_report",
        {
            "held": 6,
            "principal": "alice",
            "session": "s1",
            "ticket": None,
            "tool": ("delete_tag", None),
        },
    ),
    (
        "check",
        {
            "args": "b",
            "call_id": "c2",
            "principal": None,
            "session": "s1",
            "tool": ("delete_tag", None),
        },
    ),
    ("mixed_run", {"calls": 5, "first": "write", "principal": None, "session": "s1"}),
    ("inject_fault", {"count": 2, "skip": 2}),
    (
        "unvouched_report",
        {
            "held": 4,
            "principal": "bob",
            "session": "s3",
            "ticket": "h1-forged.e30.AAAA",
            "tool": ("search_docs", None),
        },
    ),
    ("inject_fault", {"count": 1, "skip": 3}),
    (
        "check",
        {
            "args": "b",
            "call_id": "c1",
            "principal": "alice",
            "session": "s3",
            "tool": ("update_page", None),
        },
    ),
]


def replay(tmp_path: Path, steps: list[tuple[str, dict[str, Any]]]) -> None:
    """Run `steps` on the memory backend, checking the model's invariants after each."""
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY_DOCUMENT))
    with open_backend("memory", policy, None) as backend:

        class OnBackend(QuotaMachine):
            pass

        OnBackend.backend = backend
        state = OnBackend()
        state.start()
        for name, kwargs in steps:
            getattr(state, name)(**kwargs)
            state.duplicates_at_most_three()
            state.views_agree_with_the_model()
        state.teardown()


def test_a_throttled_suspension_does_not_count_the_streak_twice(tmp_path: Path) -> None:
    """Defect class: a refusal counted twice in its principal's streak. The refusal that
    reached `suspend_after_refusals` was recorded and its streak counted, then the
    suspension's write was throttled and the check answered 503: the client's retry
    would count the streak again. The suspension is now tried again within the deadline,
    as the check's other writes are. A sequence `MODEL_RANDOM=1` found, replayed as it
    ran (the last check is the one)."""
    replay(tmp_path, THROTTLED_SUSPENSION)
