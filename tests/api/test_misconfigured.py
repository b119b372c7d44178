"""A Lambda that meets an impossible policy answers 503 `misconfigured` with Retry-After
and counts a metric: never a 500, never a stack trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chalicelib import observability
from tests.api.conftest import ADMIN, running_api
from tests.e2e.test_impossible_policy import IMPOSSIBLE
from tests.support import FixedClock


def test_an_impossible_policy_answers_503_misconfigured_never_500(
    clock: FixedClock,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logged: list[str] = []
    # Where the log line goes depends on which test built Powertools' logger first.
    monkeypatch.setattr(
        observability.logger,
        "error",
        lambda msg, **kw: logged.append(f"{msg}: {kw['extra']['error']}"),
    )
    path = tmp_path / "impossible.json"
    path.write_text(json.dumps(IMPOSSIBLE))
    with running_api(clock, "memory", policy=str(path)) as api:
        capsys.readouterr()
        answers = [
            api.check(session_id="s1", tool="delete_tag"),
            api.check(session_id="s1", tool="search_articles"),
            api.admin("/v1/sessions/s1/raise", {"category": "write", "add": 1, "reason": "r"}),
            api.get("/v1/sessions/s1", ADMIN),
        ]
        health = api.client.http.get("/health")
    for answer in answers:
        assert answer.status_code == 503, answer.body
        error = json.loads(answer.body)["error"]
        assert error["code"] == "misconfigured"
        assert int(answer.headers["Retry-After"]) >= 1
        assert "Traceback" not in answer.body.decode() and str(path) not in error["message"]
    assert health.status_code == 200  # liveness needs no policy
    output = capsys.readouterr().out
    metrics = [json.loads(line) for line in output.splitlines() if '"_aws"' in line]
    assert sum(m.get("Misconfigured", [0])[0] for m in metrics) == len(answers)
    # The log names the problem for the operator.
    assert len(logged) == len(answers) and all("below the scope" in line for line in logged)
