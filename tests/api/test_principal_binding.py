"""Issue 11, item 5: principals are authenticated. A check may claim only a principal its
server token is bound to; with no claim it counts as the token itself."""

from __future__ import annotations

from typing import Any

from chalicelib.storage.ports import StoreUnavailable, TokenRepository
from chalicelib.storage.records import TokenRecord
from tests.api.conftest import SERVER, Api, body

WRITE = {"tool": "delete_tag"}
GRANT = {
    "principal": "bot",
    "category": "write",
    "limit": 100,
    "starts_at": "2026-12-02T11:00:00Z",
    "ends_at": "2026-12-02T18:00:00Z",
    "reason": "migration",
}


def principal_used(api: Api, principal: str) -> int:
    shown = body(api.get(f"/v1/principals/{principal}"))
    return int(shown["categories"]["write"]["used"])


def assert_not_allowed(response: Any, token_id: str, principal: str) -> None:
    assert response.status_code == 403, response.body
    error = body(response)["error"]
    assert error["code"] == "principal_not_allowed"
    assert f"Token {token_id} " in error["message"] and repr(principal) in error["message"]


def test_a_bound_token_may_claim_its_exact_names_and_patterns(api: Api) -> None:
    _, headers = api.token("demo", "server", ("editor@example.com", "bot-*"))
    for session, principal in (("s1", "editor@example.com"), ("s2", "bot-7")):
        response = api.check(headers, session_id=session, principal=principal, **WRITE)
        assert response.status_code == 200, response.body
        assert body(api.get(f"/v1/sessions/{session}"))["principal"] == principal
        assert principal_used(api, principal) == 1


def test_a_claim_outside_the_binding_is_403_and_counts_nothing(api: Api) -> None:
    token_id, headers = api.token("demo", "server", ("bot-*",))
    response = api.check(headers, session_id="s1", principal="admin-bot", **WRITE)
    assert_not_allowed(response, token_id, "admin-bot")
    assert "'bot-*'" in body(response)["error"]["message"]
    assert api.get("/v1/sessions/s1").status_code == 404  # the session was never counted
    assert principal_used(api, "admin-bot") == 0
    assert principal_used(api, f"token:{token_id}") == 0


def test_an_unbound_tokens_claim_is_403(api: Api) -> None:
    token_id, headers = api.token("demo", "server")
    response = api.check(headers, session_id="s1", principal="bot", **WRITE)
    assert_not_allowed(response, token_id, "bot")
    assert "its allowed principals are none" in body(response)["error"]["message"]
    assert api.get("/v1/sessions/s1").status_code == 404


def test_without_a_claim_the_principal_is_the_token_itself(api: Api) -> None:
    token_id, headers = api.token("demo", "server", ("bot-*",))
    for session in ("fresh-1", "fresh-2", "fresh-3"):
        assert api.check(headers, session_id=session, **WRITE).status_code == 200
        shown = body(api.get(f"/v1/sessions/{session}"))
        assert shown["principal"] == f"token:{token_id}"
    # Fresh session ids from one server still share one principal budget.
    assert principal_used(api, f"token:{token_id}") == 3


def test_an_exhausted_session_cannot_claim_a_granted_principal_for_more(api: Api) -> None:
    token_id, headers = api.token("demo", "server")
    answers = [api.check(headers, session_id="run-42", **WRITE).status_code for _ in range(16)]
    assert answers == [200] * 15 + [429]
    assert api.admin("/v1/grants", GRANT).status_code == 201  # "bot" may make 100
    for _ in range(3):
        response = api.check(headers, session_id="run-42", principal="bot", **WRITE)
        assert_not_allowed(response, token_id, "bot")
    session = body(api.get("/v1/sessions/run-42"))
    assert session["principal"] == f"token:{token_id}"
    assert session["categories"]["write"]["used"] == 15
    assert session["categories"]["write"]["limit"] == 15
    assert principal_used(api, "bot") == 0
    assert api.check(headers, session_id="run-42", **WRITE).status_code == 429


def test_the_dev_server_token_may_claim_any_principal(api: Api) -> None:
    for session, principal in (("d1", "anyone"), ("d2", "ops@example.com")):
        assert (
            api.check(SERVER, session_id=session, principal=principal, **WRITE).status_code == 200
        )
        assert body(api.get(f"/v1/sessions/{session}"))["principal"] == principal
    assert api.check(SERVER, session_id="d3", **WRITE).status_code == 200
    assert body(api.get("/v1/sessions/d3"))["principal"] == "token:dev-server"


def test_no_token_may_claim_another_tokens_own_principal(api: Api) -> None:
    other, _ = api.token("demo", "server")
    response = api.check(SERVER, session_id="d1", principal=f"token:{other}", **WRITE)
    assert_not_allowed(response, "dev-server", f"token:{other}")


class FailsOnce:
    """A token store whose first lookup fails: the authorizer lets the request through
    unverified, and the route authenticates again itself."""

    def __init__(self, inner: TokenRepository) -> None:
        self._inner = inner
        self.failed = False

    def get(self, token_id: str) -> TokenRecord | None:
        if not self.failed:
            self.failed = True
            raise StoreUnavailable("looking up a token")
        return self._inner.get(token_id)


def test_the_binding_holds_when_the_authorizer_could_not_verify(api: Api) -> None:
    token_id, headers = api.token("demo", "server", ("bot-*",))
    tokens = api.container.tokens
    for principal, status in (("bot-1", 200), ("bot", 403)):
        flaky = FailsOnce(tokens)
        api.container.__dict__["tokens"] = flaky
        response = api.check(headers, session_id="s1", principal=principal, **WRITE)
        assert flaky.failed and response.status_code == status, response.body
    assert_not_allowed(response, token_id, "bot")
