"""An unexpected exception answers 500 and counts `UnhandledError` under the function
version that raised it: the defect class is a canary rollback alarm that cannot see
the new version's faults (Lambda's Errors misses a handled 500; the API's 5XX mixes
both versions and the store's 503s)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import Api


class Broken:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError("a bug in the new version")


def test_a_500_is_counted_under_the_version_that_answered_it(
    api: Api, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_VERSION", "7")
    api.container.__dict__["policy"] = Broken()
    capsys.readouterr()
    answer = api.check(session_id="s1", tool="delete_tag")
    assert answer.status_code == 500
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    (fault,) = [m for m in lines if "UnhandledError" in m]
    assert fault["version"] == "7" and fault["service"] == "mcp-quota"
    assert fault["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "McpQuota"
