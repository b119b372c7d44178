"""Issue 32's first done-when line over real HTTP, against the service as `make run`
starts it on dynalite (atomic per item, as DynamoDB): 8 concurrent retries of an
approved call, exactly one allowed."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chalicelib.quota.policy import POLICY_DIR
from tests.e2e.http import ADMIN_TOKEN, call
from tests.support import dynalite_process, running_service

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    policy = json.loads((POLICY_DIR / "default.json").read_text())
    policy["rules"] = [{"tools": ["drop_table"], "category": "write", "approval": True}]
    path: Path = tmp_path_factory.mktemp("approvals") / "policy.json"
    path.write_text(json.dumps(policy))
    with (
        dynalite_process() as (endpoint, _),
        running_service({"QUOTA_POLICY": str(path), "AWS_ENDPOINT_URL": endpoint}) as base,
    ):
        yield base


def test_an_approved_call_runs_once_of_eight_concurrent_retries(url: str) -> None:
    """Defect class: a call run twice on one approval (a read-then-write use)."""
    digest = hashlib.sha256(b'{"table":"users"}').hexdigest()
    body = {"session_id": "approve-e2e", "tool": "drop_table", "args_digest": digest}
    asked = call(f"{url}/v1/check", "POST", body)
    assert asked.status == 403 and asked.body["error"]["code"] == "approval_required"
    path = f"{url}/v1/approvals/{asked.body['approval']['id']}"
    assert call(f"{path}/approve", "POST", {}).status == 403  # the server token
    assert call(f"{path}/approve", "POST", {"reason": "ok"}, ADMIN_TOKEN).status == 200
    other = call(f"{url}/v1/check", "POST", {**body, "args_digest": "0" * 64})
    assert other.body["error"]["code"] == "approval_required"
    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(lambda _: call(f"{url}/v1/check", "POST", body).status, range(8)))
    assert statuses.count(200) == 1, statuses
    assert call(path, token=ADMIN_TOKEN).body["state"] == "used"
    again = call(f"{url}/v1/check", "POST", body)
    assert again.body["approval"]["id"] != asked.body["approval"]["id"]
    audit = call(f"{url}/v1/audit?session_id=approve-e2e", token=ADMIN_TOKEN).body["events"]
    kinds = {e["type"] for e in audit}
    assert {"approval_requested", "approval_granted", "approval_used"} <= kinds
