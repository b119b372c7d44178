"""Every answer of the JSON API, on the memory and moto backends, against openapi.yaml:
its status is documented for the operation, and its body validates against the
operation's schema, strictly (an undocumented field fails too). One scenario walks every
JSON operation through its successes and its usual refusals and errors.

schemathesis (tests/reliability/test_openapi.py) generates requests against `make run`;
this drives the states a generator rarely reaches (a refusal, a suspension, a lease, a
grant, a listing with rows) on each storage backend.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
import schemathesis
from jsonschema import Draft7Validator

from chalicelib.quota.policy import Rule
from tests.api.conftest import ADMIN, SERVER, Api, running_api
from tests.support import ROOT, FixedClock

SPEC: dict[str, Any] = schemathesis.openapi.from_path(ROOT / "openapi.yaml").raw_schema
METHODS = {"get", "post", "put", "delete"}
# The routes whose answers are HTML or files, not JSON (the browser tests cover them).
NOT_JSON = {"/actions/{token}", "/console", "/console/{name}", "/favicon.ico"}


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """A `$ref` followed within the document."""
    while "$ref" in node:
        target: Any = SPEC
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def strict(node: Any) -> Any:
    """An OpenAPI 3.0 schema as JSON Schema (`nullable` as a null type), with every object
    that lists its properties closed to others, and `allOf` merged so that closing works."""
    if not isinstance(node, dict):
        return node
    node = resolve(node)
    if "allOf" in node:
        merged: dict[str, Any] = {
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        }
        for converted in (strict(p) for p in node["allOf"]):
            part = converted["anyOf"][0] if "anyOf" in converted else converted
            merged["properties"].update(part.get("properties", {}))
            merged["required"] += part.get("required", [])
        return merged
    out: dict[str, Any] = {
        key: value for key, value in node.items() if key not in ("nullable", "description")
    }
    if "properties" in out:
        out["properties"] = {name: strict(sub) for name, sub in out["properties"].items()}
        out.setdefault("additionalProperties", False)
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = strict(out["additionalProperties"])
    if "items" in out:
        out["items"] = strict(out["items"])
    for key in ("anyOf", "oneOf"):
        if key in out:
            out[key] = [strict(sub) for sub in out[key]]
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    pattern: re.Pattern[str]
    responses: dict[str, Any]


OPERATIONS = [
    Operation(
        method.upper(),
        template,
        re.compile("^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)) + "$"),
        operation["responses"],
    )
    for template, item in SPEC["paths"].items()
    if template not in NOT_JSON
    for method, operation in item.items()
    if method in METHODS
]


def operation_for(method: str, path: str) -> Operation:
    path = path.split("?", maxsplit=1)[0]
    # The literal route wins over a template (/v1/sessions before /v1/sessions/{id}).
    found = [o for o in OPERATIONS if o.method == method and o.pattern.match(path)]
    found.sort(key=lambda o: o.template.count("{"))
    assert found, f"{method} {path} is in no operation of openapi.yaml"
    return found[0]


@dataclass
class Answer:
    method: str
    path: str
    status: int
    headers: dict[str, str]
    body: Any


class Recorder:
    """The API, keeping every answer it gives."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.answers: list[Answer] = []

    def send(self, method: str, path: str, payload: Any = None, headers: Any = None) -> Any:
        http = self.api.client.http
        raw = None if payload is None else json.dumps(payload)
        response = getattr(http, method.lower())(path, headers=headers or ADMIN, body=raw)
        answer = Answer(
            method,
            path,
            response.status_code,
            {k.lower(): v for k, v in response.headers.items()},
            json.loads(response.body) if response.body else None,
        )
        self.answers.append(answer)
        return answer


def walk(api: Api) -> list[Answer]:
    """Every JSON operation: its successes, then the usual refusals and errors."""
    r = Recorder(api)
    read = {"session_id": "s-1", "tool": "search_articles", "principal": "bot-1"}
    client = {"name": "claude-code", "version": "1.2.3"}
    write = {"session_id": "s-1", "tool": "delete_tag", "principal": "bot-1", "client": client}
    _, bound = api.token("demo", "server", ("bot-*",))
    r.send("GET", "/health")
    lease = r.send("POST", "/v1/check", {**read, "lease": 5}, bound).body["lease"]
    r.send("POST", "/v1/leases/return", {"session_id": "s-1", "lease": lease["id"], "unused": 2})
    r.send("GET", "/v1/policy", None, bound)
    for _ in range(16):  # the default policy's 15 writes, then a refusal
        r.send("POST", "/v1/check", {**write, "fail_open": {"write": 1}}, bound)
    r.send("POST", "/v1/check", {**read, "principal": "intruder"}, bound)  # 403
    r.send("POST", "/v1/check", {"session_id": "s-1"}, SERVER)  # 400
    r.send("POST", "/v1/check", {**write, "client": {"nam": "x"}}, SERVER)  # 400
    walk_minted_sessions(r, bound)
    r.send("GET", "/v1/sessions/s-1")
    r.send("GET", "/v1/sessions/never-seen")  # 404
    r.send("GET", "/v1/sessions")
    r.send("GET", "/v1/sessions?state=blocked&limit=1")
    r.send("GET", "/v1/sessions?next=x")  # 400
    raise_ = {"category": "write", "limit": 30, "reason": "migration", "expires_in_seconds": 600}
    r.send("POST", "/v1/sessions/s-1/raise", raise_)
    r.send("POST", "/v1/sessions/s-1/raise", {**raise_, "limit": 20})  # 409: never lowers
    r.send("POST", "/v1/sessions/s-1/lower", {"category": "write", "reason": "done"})
    r.send("POST", "/v1/sessions/s-1/lower", {"category": "write", "reason": "again"})  # 409
    r.send("POST", "/v1/sessions/s-1/suspend", {"reason": "loop"})
    r.send("POST", "/v1/check", read, bound)  # 429, suspended: no Retry-After
    r.send("POST", "/v1/sessions/s-1/resume", {"reason": "fixed"})
    r.send("POST", "/v1/sessions/s-1/reset", {"reason": "fresh"})
    r.send("POST", "/v1/sessions/never-seen/reset", {"reason": "none"})  # 404
    r.send("GET", "/v1/principals/bot-1")
    r.send("POST", "/v1/principals/bot-1/raise", {"category": "write", "add": 5, "reason": "r"})
    r.send("POST", "/v1/principals/bot-1/suspend", {"reason": "loop"})
    r.send("POST", "/v1/check", {**read, "session_id": "s-2"}, bound)  # 429, principal
    r.send("POST", "/v1/principals/bot-1/resume", {"reason": "fixed"})
    r.send("POST", "/v1/principals/bot-1/reset", {"reason": "fresh"})
    r.send("POST", "/v1/principals/nobody/reset", {"reason": "none"})  # 404
    r.send("GET", "/v1/tenant")
    grant = {
        "principal": "bot-1",
        "category": "write",
        "limit": 40,
        "starts_at": "2026-12-02T00:00:00Z",
        "ends_at": "2026-12-03T00:00:00Z",
        "reason": "migration",
    }
    grant_id = r.send("POST", "/v1/grants", grant).body["grant"]["grant_id"]
    r.send("GET", "/v1/grants")
    r.send("DELETE", f"/v1/grants/{grant_id}")
    r.send("DELETE", f"/v1/grants/{grant_id}")  # 404
    created = r.send("POST", "/v1/tokens", {"role": "server", "name": "ci", "principals": ["a"]})
    r.send("GET", "/v1/tokens")
    r.send("DELETE", f"/v1/tokens/{created.body['token_id']}")
    r.send("DELETE", "/v1/tokens/000000000000")  # 404
    r.send("GET", "/v1/audit")
    r.send("GET", "/v1/audit?session_id=s-1&limit=2")
    r.send("GET", "/v1/audit?next=forged")  # 400
    r.send("GET", "/v1/audit?type=quota_exceeded&principal=bot-1")
    r.send("GET", "/v1/shadow")
    r.send("GET", "/v1/me")
    r.send("GET", "/v1/console-config")
    walk_results(r)
    r.send("POST", "/v1/sessions/s-1/suspend", {"reason": "x" * 20_000})  # 413
    walk_approvals(api, r)
    return r.answers


def walk_minted_sessions(r: Recorder, bound: dict[str, str]) -> None:
    """A session the service mints (issue 31): asked for, echoed, refused when forged or
    another principal's; a call's legacy transport session."""
    call = {"session_id": "derived:w", "tool": "delete_tag", "principal": "bot-1"}
    asked = r.send("POST", "/v1/check", {**call, "mint_session": True}, bound)
    token = asked.body["session_token"]
    echoed = {**call, "session_token": token, "transport_session_id": "mcp-legacy-1"}
    r.send("POST", "/v1/check", echoed, bound)
    r.send("POST", "/v1/check", {**echoed, "session_token": token[:-3]}, bound)  # 400
    r.send("POST", "/v1/check", {**echoed, "principal": "bot-2"}, bound)  # 400


def walk_approvals(api: Api, r: Recorder) -> None:
    """The approval routes (issue 32), under the default policy plus an approval rule."""
    policy = api.container.policy
    rule = Rule("write", frozenset({"drop_table"}), approval=True)
    api.container.__dict__["policy"] = replace(policy, rules=(rule, *policy.rules))
    call = {"session_id": "s-9", "tool": "drop_table", "args_digest": "a" * 64}
    asked = r.send("POST", "/v1/check", {**call, "arguments_preview": "{}"}, SERVER)  # 403
    path = f"/v1/approvals/{asked.body['approval']['id']}"
    r.send("GET", "/v1/approvals?state=pending")
    r.send("GET", "/v1/approvals?state=nope")  # 400
    r.send("GET", path)
    r.send("GET", "/v1/approvals/ap_none")  # 404
    r.send("POST", f"{path}/approve", {"reason": "ok"})
    r.send("POST", f"{path}/deny", {"reason": "late"})  # 409
    r.send("POST", "/v1/check", call, SERVER)
    r.send("POST", "/v1/check", {"session_id": "s-9", "tool": "drop_table"}, SERVER)  # 400
    other = {**call, "args_digest": "b" * 64}
    denied = r.send("POST", "/v1/check", other, SERVER)
    r.send("POST", f"/v1/approvals/{denied.body['approval']['id']}/deny", {})
    r.send("POST", "/v1/check", other, SERVER)  # 403 approval_denied


def walk_results(r: Recorder) -> None:
    """Exactly-once writes: every `replay` state and every answer of keeping a result."""
    write = {"session_id": "s-r", "tool": "delete_tag", "call_id": "w-1"}
    kept = {"session_id": "s-r", "tool": "delete_tag", "result": {"content": []}}
    big = {**kept, "result": {"content": [{"type": "text", "text": "x" * 70_000}]}}
    r.send("POST", "/v1/check", write, SERVER)
    r.send("POST", "/v1/check", write, SERVER)  # replay: running
    r.send("GET", "/v1/results/w-1?session_id=s-r", None, SERVER)  # running
    r.send("GET", "/v1/results/w-1", None, SERVER)  # 400: no session_id
    r.send("GET", "/v1/results/w-1?session_id=s-r")  # 403: an admin token
    r.send("GET", "/v1/results/nope?session_id=s-r", None, SERVER)  # 403: no such call
    r.send("PUT", "/v1/results/w-1", kept, SERVER)  # 201
    r.send("GET", "/v1/results/w-1?session_id=s-r", None, SERVER)  # stored
    r.send("PUT", "/v1/results/w-1", kept, SERVER)  # 200 same
    r.send("PUT", "/v1/results/w-1", {**kept, "result": {"isError": True}}, SERVER)  # 409
    r.send("PUT", "/v1/results/w-1", kept)  # 403: an admin token
    r.send("PUT", "/v1/results/nope", kept, SERVER)  # 403: no such call
    r.send("PUT", "/v1/results/w-1", {"session_id": "s-r"}, SERVER)  # 400
    r.send("POST", "/v1/check", write, SERVER)  # replay: stored
    r.send("POST", "/v1/check", {**write, "call_id": "w-2"}, SERVER)
    r.send("PUT", "/v1/results/w-2", big, SERVER)  # 201, truncated
    r.send("POST", "/v1/check", {**write, "call_id": "w-2"}, SERVER)  # replay: not_kept
    replays = [(a.body or {}).get("replay") for a in r.answers]  # the policy's is a list
    states = {replay["state"] for replay in replays if isinstance(replay, dict)}
    assert states == {"stored", "running", "not_kept"}


@pytest.fixture(params=["memory", "moto"])
def answers(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[list[Answer]]:
    backend = {"memory": "memory", "moto": "dynamodb"}[request.param]
    with running_api(clock, backend, link_secret="k" * 40) as api:
        yield walk(api)


def test_every_answer_is_documented_and_matches_its_schema(answers: list[Answer]) -> None:
    problems = []
    for answer in answers:
        operation = operation_for(answer.method, answer.path)
        where = f"{answer.method} {answer.path} -> {answer.status}"
        documented = operation.responses.get(str(answer.status))
        if documented is None:
            problems.append(f"{where}: status not documented")
            continue
        content = resolve(documented).get("content", {})
        if "application/json" not in content:
            problems.append(f"{where}: no JSON body documented")
            continue
        schema = strict(content["application/json"]["schema"])
        validator = Draft7Validator(schema, format_checker=Draft7Validator.FORMAT_CHECKER)
        problems += [
            f"{where}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(answer.body)
        ]
    assert problems == []


def test_the_walk_reaches_every_json_operation_and_its_refusals(answers: list[Answer]) -> None:
    reached = {(operation_for(a.method, a.path).template, a.method) for a in answers}
    assert reached == {(o.template, o.method) for o in OPERATIONS}
    statuses = {a.status for a in answers}
    assert {200, 201, 400, 403, 404, 409, 413, 429} <= statuses
    refusals = [a for a in answers if a.status == 429]
    assert {a.body["error"]["code"] for a in refusals} == {
        "quota_exceeded",
        "session_suspended",
        "principal_suspended",
    }
    assert all("ratelimit" in a.headers for a in refusals)


def test_the_strict_schemas_catch_an_undocumented_field() -> None:
    (health,) = [o for o in OPERATIONS if o.template == "/health"]
    schema = strict(health.responses["200"]["content"]["application/json"]["schema"])
    validator = Draft7Validator(schema)
    assert validator.is_valid({"status": "ok", "service": "mcp-quota"})
    assert not validator.is_valid({"status": "ok", "service": "mcp-quota", "extra": 1})
    session = strict({"$ref": "#/components/schemas/Session"})
    assert Draft7Validator(session["properties"]["resets_at"]).is_valid(None)
    refusal = Draft7Validator(strict({"$ref": "#/components/schemas/Refusal"}))
    assert any("'extra' was unexpected" in e.message for e in refusal.iter_errors({"extra": 1}))
