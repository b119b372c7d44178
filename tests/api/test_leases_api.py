"""Leased reads over HTTP: the check's `lease` field and answer, `POST /v1/leases/return`,
the 400s for bad values, and the session view's `leased` count."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api, body

READ = {"session_id": "s1", "tool": "search_articles"}


def ret(api: Api, lease_id: Any, unused: Any, session: str = "s1") -> Any:
    return api.post(
        "/v1/leases/return", {"session_id": session, "lease": lease_id, "unused": unused}
    )


def test_a_leased_check_answers_the_lease_and_counts_all_its_calls(api: Api) -> None:
    response = api.check(**READ, lease=6)
    assert response.status_code == 200
    answer = body(response)
    lease = answer["lease"]
    assert lease["granted"] == 6 and lease["lease_max"] == 10 and lease["lease_seconds"] == 30
    assert lease["expires_at"] == "2026-12-02T12:00:30Z"
    assert lease["id"].startswith("read.")
    assert (answer["used"], answer["remaining"]) == (6, 194)


def test_a_lease_is_capped_at_lease_max_and_writes_never_lease(api: Api) -> None:
    assert body(api.check(**READ, lease=100))["lease"]["granted"] == 10
    write = body(api.check(session_id="s1", tool="delete_tag", lease=5))
    assert "lease" not in write and write["used"] == 1
    plain = body(api.check(**READ))
    assert "lease" not in plain and plain["used"] == 11


@pytest.mark.parametrize("value", [0, -1, 101, "3", True, 1.5, [2]])
def test_a_bad_lease_is_a_400_naming_the_field(api: Api, value: Any) -> None:
    response = api.check(**READ, lease=value)
    assert response.status_code == 400
    error = body(response)["error"]
    assert error["field"] == "lease" and "from 1 to 100" in error["message"]


def test_unspent_calls_come_back_once_and_the_view_shows_used_and_leased(api: Api) -> None:
    lease = body(api.check(**READ, lease=10))["lease"]
    api.check(**READ)
    view = body(api.get("/v1/sessions/s1"))["categories"]["read"]
    assert (view["used"], view["leased"]) == (11, 10)
    first = ret(api, lease["id"], 8)
    assert first.status_code == 200 and body(first) == {"returned": 8}
    assert body(ret(api, lease["id"], 8)) == {"returned": 0}
    view = body(api.get("/v1/sessions/s1"))["categories"]["read"]
    assert (view["used"], view["leased"], view["remaining"]) == (3, 2, 197)


def test_a_return_for_an_unknown_session_or_lease_is_taken_and_changes_nothing(
    api: Api,
) -> None:
    assert body(ret(api, "read.abcdef.5.0.0", 5, "nobody")) == {"returned": 0}
    assert body(ret(api, "write.abcdef.5.0.0", 5)) == {"returned": 0}  # writes never lease
    assert body(ret(api, "nocat.abcdef.5.0.0", 5)) == {"returned": 0}
    assert api.get("/v1/sessions/nobody").status_code == 404


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"session_id": "s1", "unused": 1}, "lease"),
        ({"session_id": "s1", "lease": "nonsense", "unused": 1}, "lease"),
        ({"session_id": "s1", "lease": 7, "unused": 1}, "lease"),
        ({"session_id": "s1", "lease": "read.abcdef.5.0.0", "unused": 6}, "unused"),
        ({"session_id": "s1", "lease": "read.abcdef.5.0.0", "unused": -1}, "unused"),
        ({"session_id": "s1", "lease": "read.abcdef.5.0.0"}, "unused"),
        ({"lease": "read.abcdef.5.0.0", "unused": 1}, "session_id"),
        ({"session_id": "s1", "lease": "read.abcdef.5.0.0", "unused": 1, "x": 1}, "x"),
    ],
)
def test_a_bad_return_is_a_400_naming_the_field(
    api: Api, payload: dict[str, Any], field: str
) -> None:
    response = api.post("/v1/leases/return", payload)
    assert response.status_code == 400
    assert body(response)["error"]["field"] == field


def test_a_leased_check_on_dynamodb_counts_and_returns_the_same(dynamo_api: Api) -> None:
    lease = body(dynamo_api.check(**READ, lease=5))["lease"]
    assert body(ret(dynamo_api, lease["id"], 4)) == {"returned": 4}
    view = body(dynamo_api.get("/v1/sessions/s1"))["categories"]["read"]
    assert (view["used"], view["leased"]) == (1, 1)


def test_a_forged_lease_id_gives_nothing_back(api: Api) -> None:
    lease = body(api.check(**READ, lease=10))["lease"]
    category, check, granted, at, started, *whom = lease["id"].split(".")
    forged = [
        ".".join((category, check, "20", at, started, *whom)),  # claims more calls
        ".".join((category, check, granted, "1", started, *whom)),  # another grant time
        ".".join((category, "AAAAAA", granted, at, started, *whom)),  # another check
        ".".join((category, check, granted, at, started, "Ym9i")),  # another principal
        ".".join((category, check, granted, at, started)),  # no principal
    ]
    for _ in range(3):
        for lease_id in forged:
            assert body(ret(api, lease_id, 10)) == {"returned": 0}
    view = body(api.get("/v1/sessions/s1"))["categories"]["read"]
    assert (view["used"], view["leased"]) == (10, 10)
    assert body(ret(api, lease["id"], 10)) == {"returned": 10}  # the real one, once
    assert body(ret(api, lease["id"], 10)) == {"returned": 0}
