"""Issue 11, item 5: principals are authenticated. A server token may claim only the
principals it is bound to (names or * patterns); a check that claims none acts for the
token itself."""

from __future__ import annotations

import pytest

from chalicelib.errors import PrincipalNotAllowed
from chalicelib.tokens import Identity, TokenRecord, effective_principal, hash_secret, new_token
from tests.api.conftest import Api, body


def bound_token(api: Api, *principals: str) -> tuple[str, dict[str, str]]:
    token_id, token = new_token()
    record = TokenRecord(
        token_id, hash_secret(token), "demo", "server", "bound", api.clock(), None, principals
    )
    api.container.tokens.put(record)
    return token_id, {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def test_effective_principal_rules() -> None:
    bound = Identity("demo", "server", "abc123abc123", principals=("bot", "team-*"))
    assert effective_principal(bound, None) == "token:abc123abc123"
    assert effective_principal(bound, "bot") == "bot"
    assert effective_principal(bound, "team-blue") == "team-blue"
    with pytest.raises(PrincipalNotAllowed, match=r"abc123abc123.*'intruder'"):
        effective_principal(bound, "intruder")
    unbound = Identity("demo", "server", "def456def456")
    with pytest.raises(PrincipalNotAllowed, match="none"):
        effective_principal(unbound, "bot")


def test_a_bound_token_claims_its_principals_and_nothing_else(api: Api) -> None:
    token_id, headers = bound_token(api, "editor@example.com", "migration-*")
    assert (
        api.check(
            headers, session_id="b1", tool="delete_tag", principal="editor@example.com"
        ).status_code
        == 200
    )
    assert (
        api.check(headers, session_id="b2", tool="delete_tag", principal="migration-7").status_code
        == 200
    )
    refused = api.check(headers, session_id="b3", tool="delete_tag", principal="bot")
    assert refused.status_code == 403
    error = body(refused)["error"]
    assert error["code"] == "principal_not_allowed"
    assert token_id in error["message"] and "'bot'" in error["message"]
    assert api.get("/v1/sessions/b3").status_code == 404  # nothing was counted


def test_without_a_principal_the_token_is_the_principal(api: Api) -> None:
    token_id, headers = bound_token(api)
    for i in range(3):
        assert api.check(headers, session_id=f"fresh-{i}", tool="delete_tag").status_code == 200
    assert body(api.get("/v1/sessions/fresh-0"))["principal"] == f"token:{token_id}"
    shown = body(api.get(f"/v1/principals/token:{token_id}"))
    assert shown["categories"]["write"]["used"] == 3  # fresh sessions share one budget


def test_an_exhausted_session_cannot_borrow_a_granted_principal(api: Api) -> None:
    grant = {
        "principal": "bot",
        "category": "write",
        "limit": 100,
        "starts_at": "2026-12-02T11:00:00Z",
        "ends_at": "2026-12-02T14:00:00Z",
        "reason": "migration",
    }
    assert api.admin("/v1/grants", grant).status_code == 201
    _, headers = bound_token(api)
    codes = [api.check(headers, session_id="x", tool="delete_tag").status_code for _ in range(16)]
    assert codes == [200] * 15 + [429]
    borrowed = api.check(headers, session_id="x", tool="delete_tag", principal="bot")
    assert borrowed.status_code == 403
    assert body(borrowed)["error"]["code"] == "principal_not_allowed"


def test_the_dev_server_token_may_claim_any_principal(api: Api) -> None:
    assert api.check(session_id="d", tool="delete_tag", principal="anyone").status_code == 200
