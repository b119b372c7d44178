"""Issue 22 over HTTP against the service as `make run` starts it: weighed calls, shadow
mode (writes not enforced) and the refusals a client held, reported afterwards."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalicelib.quota.policy import POLICY_DIR
from tests.e2e.http import ADMIN_TOKEN, call
from tests.support import running_service

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Writes in shadow mode; a `strict` category enforced, to hold refusals in. The
    calls count as the server token's own principal, `token:dev-server`."""
    policy = json.loads((POLICY_DIR / "default.json").read_text())
    policy["categories"]["write"]["enforce"] = False
    policy["categories"]["strict"] = {
        "limit": 2,
        "principal": {"limit": 1000, "window": "24h"},
    }
    path: Path = tmp_path_factory.mktemp("issue22") / "policy.json"
    path.write_text(json.dumps(policy))
    with running_service({"QUOTA_POLICY": str(path)}) as base:
        yield base


def sid() -> str:
    return f"h22-{uuid.uuid4().hex[:10]}"


def test_shadow_mode_over_http(url: str) -> None:
    session = sid()
    body = {"session_id": session, "tool": "delete_tags", "units": 10, "server": "articles"}
    first = call(f"{url}/v1/check", "POST", body)
    second = call(f"{url}/v1/check", "POST", body)
    assert first.status == 200 and "shadow" not in first.body
    assert second.status == 200 and second.body["used"] == 20 and second.body["limit"] == 15
    assert second.body["shadow"]["scope"] == "session"
    assert "asks for 10 'write' units" in second.body["shadow"]["message"]
    view = call(f"{url}/v1/shadow", token=ADMIN_TOKEN).body
    [group] = [g for g in view["groups"] if g["tool"] == "delete_tags"]
    assert group["server"] == "articles" and group["refusals"] == 1


def test_held_refusals_escalate_over_http(url: str) -> None:
    session = sid()
    body = {
        "session_id": session,
        "tool": "run_x",
        "category": "strict",
        "principal": "token:dev-server",
    }
    replies = [call(f"{url}/v1/check", "POST", body) for _ in range(3)]
    assert [r.status for r in replies] == [200, 200, 429]
    # A bare count, vouched for by nobody, counts nothing (issue 28).
    bare = call(f"{url}/v1/check", "POST", {**body, "refused_locally": {"strict": 49}})
    assert bare.status == 429 and bare.body["error"]["code"] == "quota_exceeded"
    # The client held 48 more under the refusal's ticket; with them the streak reaches 50.
    report = {"count": 48, "ticket": bare.body["hold_ticket"]}
    held = call(f"{url}/v1/check", "POST", {**body, "refused_locally": {"strict": report}})
    assert held.status == 429 and held.body["error"]["code"] == "principal_suspended"
    resumed = call(
        f"{url}/v1/principals/token%3Adev-server/resume",
        "POST",
        {"reason": "test over"},
        token=ADMIN_TOKEN,
    )
    assert resumed.status == 200


def test_a_malformed_report_or_digest_is_a_400(url: str) -> None:
    body = {"session_id": sid(), "tool": "run_x", "category": "strict"}
    bad = call(f"{url}/v1/check", "POST", {**body, "refused_locally": {"strict": -1}})
    assert bad.status == 400 and bad.body["error"]["field"] == "refused_locally.strict"
    digest = call(f"{url}/v1/check", "POST", {**body, "args_digest": "f" * 64})
    assert digest.status == 200
