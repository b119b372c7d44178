from __future__ import annotations

from typing import Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import EndpointConnectionError

from tests.api.conftest import ADMIN, SERVER, Api, body, running_api
from tests.support import FixedClock

WRITE = {"session_id": "agent-1", "tool": "delete_tag"}


def test_health_needs_no_token(api: Api) -> None:
    response = api.client.http.get("/health")
    assert response.status_code == 200 and body(response)["status"] == "ok"


def test_allowed_answer_has_the_documented_fields_and_headers(api: Api) -> None:
    response = api.check(**WRITE)
    assert response.status_code == 200
    data = body(response)
    # The default tenant ceiling (1000) is split over 16 shards (of 63 or 62): its figures
    # are those of the shard that counted the call, scaled to the whole.
    tenant_used = data["scopes"]["tenant"]["used"]
    assert tenant_used in (16, 17)
    assert data == {
        "allowed": True,
        "session_id": "agent-1",
        "tool": "delete_tag",
        "category": "write",
        "used": 1,
        "limit": 15,
        "remaining": 14,
        "resets_at": "2026-12-02T13:00:00Z",
        "duplicate": False,
        "scopes": {
            "principal": {
                "used": 1,
                "limit": 100,
                "remaining": 99,
                "window_seconds": 86400,
                "resets_at": "2026-12-03T00:00:00Z",
            },
            "tenant": {
                "used": tenant_used,
                "limit": 1000,
                "remaining": 1000 - tenant_used,
                "window_seconds": 3600,
                "resets_at": "2026-12-02T13:00:00Z",
            },
        },
    }
    # One entry per scope that applies; no principal claimed here, so the principal is the
    # server token's own (token:dev-server).
    policy = '"write";q=15;w=3600, "write-principal";q=100;w=86400, "write-tenant";q=1000;w=3600'
    assert response.headers["RateLimit-Policy"] == policy
    remaining = (
        f'"write";r=14;t=3600, "write-principal";r=99;t=43200, '
        f'"write-tenant";r={1000 - tenant_used};t=3600'
    )
    assert response.headers["RateLimit"] == remaining


def test_a_read_has_one_scope_and_one_entry(api: Api) -> None:
    response = api.check(session_id="r1", tool="search_articles")
    assert "scopes" not in body(response)
    assert response.headers["RateLimit"] == '"read";r=199;t=3600'


def test_the_sixteenth_write_is_refused_with_an_explicit_message(api: Api) -> None:
    codes = [api.check(**WRITE).status_code for _ in range(15)]
    assert codes == [200] * 15
    response = api.check(**WRITE)
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "3600"
    data = body(response)
    assert data["allowed"] is False and data["used"] == 15 and data["limit"] == 15
    assert data["remaining"] == 0 and data["retry_after_seconds"] == 3600
    assert data["error"]["code"] == "quota_exceeded"
    message = data["error"]["message"]
    assert "NOT run" in message and "agent-1" in message and "15/15" in message


def test_retry_after_is_the_configured_idle_timeout(clock: FixedClock) -> None:
    with running_api(clock, "memory", idle_timeout_seconds=1) as api:
        for _ in range(15):
            api.check(**WRITE)
        response = api.check(**WRITE)
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    assert body(response)["retry_after_seconds"] == 1


def test_reads_get_200_then_refused_on_the_201st(api: Api) -> None:
    for _ in range(200):
        assert api.check(session_id="r", tool="search_articles").status_code == 200
    assert api.check(session_id="r", tool="search_articles").status_code == 429


def test_annotations_classify_unlisted_tools(api: Api) -> None:
    ro = api.check(session_id="x", tool="lookup", annotations={"readOnlyHint": True})
    rw = api.check(session_id="x", tool="lookup", annotations={"readOnlyHint": False})
    unknown = api.check(session_id="x", tool="lookup")
    assert [body(r)["category"] for r in (ro, rw, unknown)] == ["read", "write", "write"]


def test_tenant_comes_from_the_token_not_the_body(api: Api) -> None:
    _, other = api.token("acme", "server")
    for _ in range(15):
        api.check(**WRITE)
    assert api.check(**WRITE).status_code == 429
    assert api.check(other, **WRITE).status_code == 200
    assert api.post("/v1/check", {**WRITE, "tenant": "acme"}).status_code == 400


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ("{not json", "body"),
        ([1, 2], "body"),
        ({"tool": "t"}, "session_id"),
        ({"session_id": "s", "tool": "bad tool"}, "tool"),
        ({"session_id": "s", "tool": "t", "category": "nope"}, "category"),
        ({"session_id": "s", "tool": "t", "extra": 1}, "extra"),
    ],
)
def test_bad_input_is_a_400_that_names_the_field(api: Api, payload: Any, field: str) -> None:
    response = api.post("/v1/check", payload)
    assert response.status_code == 400
    error = body(response)["error"]
    assert error["code"] == "invalid_request" and error["field"] == field
    assert field in error["message"] or field == "body"


def test_oversized_body_is_413(api: Api) -> None:
    response = api.post("/v1/check", {"session_id": "s", "tool": "t", "pad": "x" * 17000})
    assert response.status_code == 413
    assert body(response)["error"]["code"] == "payload_too_large"


def test_wrong_content_type_is_415(api: Api) -> None:
    headers = {**SERVER, "Content-Type": "text/plain"}
    response = api.client.http.post("/v1/check", headers=headers, body="x")
    assert response.status_code == 415


def test_no_token_401_unknown_or_revoked_token_403(api: Api) -> None:
    no_token = {"Content-Type": "application/json"}
    assert api.check(no_token, **WRITE).status_code == 401
    bad = {**SERVER, "Authorization": "Bearer mcpq_000000000000_" + "x" * 43}
    assert api.check(bad, **WRITE).status_code == 403
    assert api.check({**SERVER, "Authorization": "Basic abc"}, **WRITE).status_code == 403
    token_id, headers = api.token("demo", "server")
    assert api.check(headers, **WRITE).status_code == 200
    api.container.tokens.revoke(token_id, api.clock())
    assert api.check(headers, **WRITE).status_code == 403


def test_admin_token_may_check_too(api: Api) -> None:
    assert api.check(ADMIN, **WRITE).status_code == 200


def test_throttled_store_is_a_503_with_retry_after(dynamo_api: Api) -> None:
    """Every UpdateItem is throttled, whichever of the session's, the principal's and the
    tenant's (sent at once, in no fixed order) comes first."""
    api = dynamo_api
    throttled = {
        "Error": {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"},
        "ResponseMetadata": {"HTTPStatusCode": 400},
    }

    def throttle(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        return AWSResponse("", 400, HTTPHeaders(), None), throttled

    # A before-call handler's answer is the call's (as botocore's Stubber answers).
    events = api.container.dynamodb.meta.events
    events.register("before-call.dynamodb.UpdateItem", throttle)  # type: ignore[arg-type]
    response = api.check(**WRITE)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    error = body(response)["error"]
    assert error["code"] == "store_unavailable" and "throttled" in error["message"]
    assert "Traceback" not in response.body.decode()


def test_unreachable_store_is_a_503_with_retry_after(dynamo_api: Api) -> None:
    api = dynamo_api

    def down(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    api.container.dynamodb.meta.events.register("before-send.dynamodb.UpdateItem", down)
    response = api.check(**WRITE)
    assert response.status_code == 503 and int(response.headers["Retry-After"]) >= 1
    assert "could not be reached" in body(response)["error"]["message"]


def test_unexpected_errors_are_a_plain_500_without_a_trace(dynamo_api: Api) -> None:
    api = dynamo_api

    def boom(**_: Any) -> None:
        raise RuntimeError("secret internals")

    api.container.dynamodb.meta.events.register("before-send.dynamodb.UpdateItem", boom)
    response = api.check(**WRITE)
    assert response.status_code == 500
    text = response.body.decode()
    assert "secret internals" not in text and "Traceback" not in text


def test_token_store_outage_is_a_503_not_a_500(dynamo_api: Api) -> None:
    api = dynamo_api
    _, headers = api.token("demo", "server")

    def down(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    api.container.token_dynamodb.meta.events.register("before-send.dynamodb.GetItem", down)
    response = api.check(headers, **WRITE)
    assert response.status_code == 503 and response.headers["Retry-After"]
    api.container.token_dynamodb.meta.events.unregister("before-send.dynamodb.GetItem", down)
    assert api.check(headers, **WRITE).status_code == 200
    bad = {**headers, "Authorization": "Bearer mcpq_000000000000_" + "x" * 43}
    api.container.token_dynamodb.meta.events.register("before-send.dynamodb.GetItem", down)
    assert api.check(bad, **WRITE).status_code == 503
    api.container.token_dynamodb.meta.events.unregister("before-send.dynamodb.GetItem", down)
    assert api.check(bad, **WRITE).status_code == 403


def test_deeply_nested_json_is_a_400(api: Api) -> None:
    response = api.post("/v1/check", "[" * 5000 + "]" * 5000)
    assert response.status_code == 400 and body(response)["error"]["field"] == "body"
