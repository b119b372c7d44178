"""The CodeDeploy PreTraffic hook: its two probes are ones the real app answers as the
hook expects, and a version that fails either is reported Failed. The defect class: a
canary that takes traffic before anything has shown the new version can answer."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import app as app_module
from chalicelib.api.authorizer import bearer
from deploy import pre_traffic
from tests.deploy.conftest import Packaged
from tests.support import FixedClock, fresh_settings


class Context:
    aws_request_id = "pre-traffic"
    function_name = "CodeDeployHook_test"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@pytest.fixture
def memory_app() -> Iterator[None]:
    from chalicelib.wiring import Container  # noqa: PLC0415

    settings = fresh_settings("pre", backend="memory", dev_tokens=False)
    app_module.reset_dependencies(Container(settings=settings, clock=FixedClock()))
    yield
    app_module.reset_dependencies(None)


def test_the_probes_are_answered_as_the_hook_expects_by_the_real_app(memory_app: None) -> None:
    health = app_module.app(pre_traffic.HEALTH_EVENT, Context())
    assert pre_traffic.answers_health(health), health
    refused = bearer(pre_traffic.AUTHORIZER_EVENT, Context())
    assert pre_traffic.refuses_junk(refused), refused


class FakeLambda:
    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.invoked: list[str] = []

    def invoke(self, FunctionName: str, Payload: bytes) -> dict[str, Any]:
        self.invoked.append(FunctionName)
        answer = self.answers[FunctionName]
        out: dict[str, Any] = {"Payload": io.BytesIO(json.dumps(answer).encode())}
        if isinstance(answer, dict) and "errorMessage" in answer:
            out["FunctionError"] = "Unhandled"
        return out


GOOD_HEALTH = {"statusCode": 200, "body": json.dumps({"status": "ok"})}
GOOD_AUTH = {"principalId": "anonymous", "policyDocument": {"Statement": [{"Resource": []}]}}


def test_a_version_that_fails_either_probe_is_reported_failed() -> None:
    good = FakeLambda({"api:7": GOOD_HEALTH, "auth:7": GOOD_AUTH})
    assert pre_traffic.healthy(good, "api:7", "auth:7")
    assert good.invoked == ["api:7", "auth:7"]
    for answers in (
        {"api:7": {"errorMessage": "ImportError"}, "auth:7": GOOD_AUTH},
        {"api:7": {"statusCode": 500, "body": "{}"}, "auth:7": GOOD_AUTH},
        {"api:7": GOOD_HEALTH, "auth:7": {**GOOD_AUTH, "principalId": "unverified"}},
        {"api:7": GOOD_HEALTH, "auth:7": {"errorMessage": "boom"}},
    ):
        assert not pre_traffic.healthy(FakeLambda(answers), "api:7", "auth:7"), answers


def test_the_hook_reports_to_codedeploy(monkeypatch: pytest.MonkeyPatch) -> None:
    reported: list[dict[str, Any]] = []

    class FakeCodeDeploy:
        def put_lifecycle_event_hook_execution_status(self, **kwargs: Any) -> None:
            reported.append(kwargs)

    clients = {
        "lambda": FakeLambda({"a": GOOD_HEALTH, "b": GOOD_AUTH}),
        "codedeploy": FakeCodeDeploy(),
    }
    monkeypatch.setattr("boto3.client", lambda name: clients[name])
    monkeypatch.setenv("API_VERSION", "a")
    monkeypatch.setenv("AUTHORIZER_VERSION", "b")
    pre_traffic.handler({"DeploymentId": "d-1", "LifecycleEventHookExecutionId": "h-1"}, None)
    assert reported == [
        {"deploymentId": "d-1", "lifecycleEventHookExecutionId": "h-1", "status": "Succeeded"}
    ]


def test_both_canaries_run_the_hook_inlined_within_lambdas_bound(packaged: Packaged) -> None:
    hook = packaged.resources["PreTrafficHook"]["Properties"]
    assert hook["InlineCode"] == Path(pre_traffic.__file__).read_text()
    assert len(hook["InlineCode"]) < 4096  # CloudFormation's bound on inline code
    assert hook["FunctionName"] == {"Fn::Sub": "CodeDeployHook_${AWS::StackName}"}
    assert hook["Environment"]["Variables"] == {
        "API_VERSION": {"Ref": "APIHandler.Version"},
        "AUTHORIZER_VERSION": {"Ref": "Bearer.Version"},
    }
    for name in ("APIHandler", "Bearer"):
        preference = packaged.resources[name]["Properties"]["DeploymentPreference"]
        assert preference["Hooks"] == {"PreTraffic": {"Ref": "PreTrafficHook"}}
