"""Issue 31 items 4 and 5: the service serves the rules the MCP side weighs calls by
(`GET /v1/policy`, one policy instead of a second file in the proxy), and it counts
resources and prompts under the tool names `resource:<uri>` and `prompt:<name>`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.conftest import SERVER, Api, body, running_api
from tests.support import FixedClock

POLICY = {
    "version": 1,
    "categories": {
        "read": {"limit": 6, "max_limit": 100, "notify": False, "lease": False},
        "write": {"limit": 15, "max_limit": 100, "notify": True},
    },
    "rules": [
        {"tools": ["delete_tags"], "category": "write", "units_from": "tags"},
        {"pattern": "delete_*", "category": "write"},
    ],
}


@pytest.fixture
def ruled(tmp_path: Path, clock: FixedClock) -> Iterator[Api]:
    policy = tmp_path / "ruled.json"
    policy.write_text(json.dumps(POLICY))
    with running_api(clock, "memory", policy=str(policy)) as api:
        yield api


def test_a_server_token_reads_the_rules_with_units_from(ruled: Api) -> None:
    """Defect class: two policies (units_from only in the proxy's own file)."""
    answer = ruled.get("/v1/policy", SERVER)
    assert answer.status_code == 200
    data = body(answer)
    assert data["rules"] == [
        {"category": "write", "tools": ["delete_tags"], "units_from": "tags"},
        {"category": "write", "pattern": "delete_*"},
    ]
    assert data["categories"] == ["read", "write"]
    assert data["replay"] == ["write"]  # whose results the MCP side keeps (issue 32)
    assert answer.headers["Cache-Control"] == f"max-age={data['max_age_seconds']}"


def test_the_rules_need_a_token(ruled: Api) -> None:
    assert ruled.get("/v1/policy", {"Accept": "application/json"}).status_code == 401


@pytest.mark.parametrize(
    "tool",
    [
        "resource:tags://deletions",
        "resource:file:///notes/a%20b.txt?rev=2&x=y#top",
        "resource:https://example.com/items/[1]@v,1;a=b!~$'()*+",
        "prompt:tag_report",
    ],
)
def test_resources_and_prompts_are_checked_under_their_names(api: Api, tool: str) -> None:
    """Defect class: a resource URI's characters refused by the tool-name rule."""
    answer = api.check(session_id="s", tool=tool, annotations={"readOnlyHint": True})
    assert answer.status_code == 200, body(answer)
    assert body(answer)["category"] == "read"


def test_a_resource_name_still_refuses_spaces_and_controls(api: Api) -> None:
    answer = api.check(session_id="s", tool="resource:a b")
    assert answer.status_code == 400
