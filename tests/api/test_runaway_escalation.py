"""Batching a runaway loop's streak (issue 29, item 2) never moves a suspension: random
loops of refusals, at any pace, interleaved with allowed calls and administrators' raises,
resets and resumes, get the very same answers in one container with the container cache
and streak batching as with every refusal sent to the store with its streak, and, once
what the container holds back is recorded, the same streak and the same refused count."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from chalicelib.check import runaway
from chalicelib.check.afterwards import settle_all
from tests.api.conftest import Api, body, running_api
from tests.api.test_scopes import POLICY, write
from tests.support import FixedClock

# Seconds before a loop's next call: at least the clock's millisecond (a refusal in the
# very millisecond of its principal's allowed call is a tie the streak breaks either way).
PACES = (0.001, 0.25, 0.5, 1.0, 3.0, 11.0)
ADMIN = {
    "raise": ("/v1/sessions/s/raise", {"category": "write", "add": 1, "reason": "x"}),
    "reset_session": ("/v1/sessions/s/reset", {"reason": "x"}),
    "reset_principal": ("/v1/principals/bot/reset", {"reason": "x"}),
    "resume": ("/v1/principals/bot/resume", {"reason": "x"}),
}
Step = tuple[str, int]
# Mostly the loop's next call (at one of `PACES`); the pace of any other step is unused.
steps = st.lists(
    st.tuples(
        st.sampled_from(["loop"] * 12 + ["allowed", "read", *ADMIN]),
        st.integers(0, len(PACES) - 1),
    ),
    min_size=20,
    max_size=60,
)


def answer(response: Any) -> str:
    """What a client tells apart: the status, and the refusal's code."""
    if response.status_code == 200:
        return "200"
    return f"{response.status_code} {body(response).get('error', {}).get('code')}"


def run(policy: Path, cache_ms: int, script: list[Step]) -> tuple[list[str], int, int]:
    """The answers to `script` in one container, the principal's streak in the write
    category (stored plus what waits in the container), and the session's refused count
    once what the container holds back is recorded."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(runaway, "REFUSAL_CACHE_MS", cache_ms)
        with running_api(FixedClock(), "memory", policy=str(policy)) as api:
            answers = []
            for i, (what, pace) in enumerate(script):
                answers.append(answer(step(api, what, i, pace)))
                settle_all(10)  # one step at a time: what a step leaves for later, done
            stored = body(api.get("/v1/principals/bot")).get("streaks", {}).get("write", 0)
            tenant = api.container.settings.dev_tenant
            waiting = api.container.checks.deferred_streaks(tenant, "bot").get("write", 0)
            api.container.checks.flush_held()
            settle_all(10)
            view = body(api.get("/v1/sessions/s")).get("categories", {})
    return answers, stored + waiting, view.get("write", {}).get("refused", 0)


def step(api: Api, what: str, i: int, pace: int) -> Any:
    if what == "loop":
        api.clock.advance(PACES[pace])
        return write(api, "s")
    if what == "allowed":
        return write(api, f"other-{i}")  # its principal's call allowed: the streak ends
    if what == "read":  # counted in the looping session: its last calls change
        return api.check(session_id="s", tool="search_articles", principal="bot")
    path, payload = ADMIN[what]
    return api.admin(path, payload)


@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(script=steps)
def test_batching_suspends_at_the_same_refusal(script: list[Step]) -> None:
    """Defect classes: late escalation, innocent suspension, lost streak counts. A streak
    held back in the container must neither delay nor advance the refusal that suspends
    the principal, nor survive what ends the stored streak."""
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.json"
        # The principal's budget never refuses here: its streak alone is under test.
        write_budget = {"limit": 3, "principal": {"limit": 10_000, "window": "24h"}}
        categories = {**POLICY["categories"], "write": write_budget}  # type: ignore[dict-item]
        policy.write_text(json.dumps({**POLICY, "categories": categories}))
        batched = run(policy, runaway.REFUSAL_CACHE_MS, script)
        sent = run(policy, 0, script)
    event("suspended" if "429 principal_suspended" in sent[0] else "not suspended")
    assert batched == sent
