"""Issue 22, item 2: a check may weigh `units` (1-1000), counted all or nothing at every
scope and refused whole, with how many units remain. On the memory backend and moto."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import Api, body
from tests.api.test_scopes import scoped

__all__ = ["scoped"]  # the fixture, used by name


def weighed(api: Api, session: str, units: int, principal: str = "bot") -> Any:
    return api.check(session_id=session, tool="delete_tags", principal=principal, units=units)


def test_units_are_counted_at_every_scope(scoped: Api) -> None:
    data = body(weighed(scoped, "s", 2))
    assert data["allowed"] is True and data["used"] == 2 and data["remaining"] == 1
    assert data["scopes"]["principal"]["used"] == 2
    assert data["scopes"]["tenant"]["used"] == 2


def test_units_that_do_not_fit_are_refused_whole_and_counted_nowhere(scoped: Api) -> None:
    assert weighed(scoped, "s", 2).status_code == 200
    refused = weighed(scoped, "s", 2)
    assert refused.status_code == 429
    data = body(refused)
    assert data["error"]["code"] == "quota_exceeded" and data["error"]["scope"] == "session"
    message = data["error"]["message"]
    assert "asks for 2 'write' units" in message and "has 1 unit left" in message
    assert "Nothing was counted" in message
    # Nothing was taken anywhere: the last unit still fits, at every scope.
    last = body(weighed(scoped, "s", 1))
    assert last["used"] == 3 and last["scopes"]["principal"]["used"] == 3
    assert last["scopes"]["tenant"]["used"] == 3
    # No exhaustion was marked by the weighed refusal: the real one emails once.
    assert scoped.sent() == []
    assert weighed(scoped, "s", 1).status_code == 429
    assert len(scoped.sent()) == 1


def test_a_call_heavier_than_the_limit_is_refused_before_any_count(scoped: Api) -> None:
    refused = weighed(scoped, "new", 4)  # the session limit is 3: it can never fit
    assert refused.status_code == 429
    assert "asks for 4 'write' units" in body(refused)["error"]["message"]
    first = body(weighed(scoped, "new", 1))
    assert first["used"] == 1 and first["scopes"]["principal"]["used"] == 1


def test_a_session_raise_lets_a_heavier_call_fit(scoped: Api) -> None:
    assert weighed(scoped, "r", 1).status_code == 200
    raised = scoped.admin(
        "/v1/sessions/r/raise", {"category": "write", "limit": 5, "reason": "bulk cleanup"}
    )
    assert raised.status_code == 200
    data = body(weighed(scoped, "r", 4))
    assert data["allowed"] is True and data["used"] == 5 and data["limit"] == 5


def test_the_principal_budget_refuses_what_does_not_fit_and_the_session_gives_back(
    scoped: Api,
) -> None:
    assert weighed(scoped, "a", 3).status_code == 200  # principal 3/5
    refused = weighed(scoped, "b", 3)
    data = body(refused)
    assert refused.status_code == 429 and data["error"]["scope"] == "principal"
    assert "has 2 units left" in data["error"]["message"]
    assert body(weighed(scoped, "b", 2))["used"] == 2  # session b took nothing back then


@pytest.mark.parametrize(
    "extra",
    [{"units": 0}, {"units": 1001}, {"units": "2"}, {"units": True}],
)
def test_bad_units_are_rejected(scoped: Api, extra: dict[str, Any]) -> None:
    response = scoped.check(session_id="v", tool="delete_tags", **extra)
    assert response.status_code == 400
    assert body(response)["error"]["field"] == "units"


def test_a_weighed_read_gets_no_lease(scoped: Api) -> None:
    response = scoped.check(session_id="l", tool="search_articles", units=3, lease=5)
    data = body(response)
    assert response.status_code == 200 and data["used"] == 3 and "lease" not in data


def test_an_args_digest_is_accepted_and_a_malformed_one_rejected(scoped: Api) -> None:
    digest = "0" * 63 + "a"
    ok = scoped.check(session_id="d", tool="delete_tag", args_digest=digest)
    assert ok.status_code == 200
    bad = scoped.check(session_id="d", tool="delete_tag", args_digest="A" * 64)
    assert bad.status_code == 400 and body(bad)["error"]["field"] == "args_digest"
