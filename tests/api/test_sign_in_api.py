"""The admin API for people signed in through an identity provider, through the real
authorizer: a viewer reads, an operator acts on sessions and principals, an admin
manages tokens and grants too; an expired or foreign token is refused. Static tokens of
the same roles behave the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from local_issuer import SigningKey

from chalicelib.auth import jwt
from chalicelib.auth.oidc import IssuerKeys, OidcVerifier
from tests.api.conftest import SERVER, Api, body, running_api
from tests.support import FixedClock
from tests.unit.test_sign_in_tokens import CLIENT, ISSUER, FakeIssuer, claims


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey("api-key")


@pytest.fixture
def signed_in_api(clock: FixedClock, key: SigningKey) -> Iterator[Api]:
    """The API with an identity provider whose documents a fake serves."""
    with running_api(clock, "memory", oidc_issuer=ISSUER, oidc_client_id=CLIENT) as api:
        issuer = FakeIssuer(key)
        issuer_doc = issuer(f"{ISSUER}/.well-known/openid-configuration")
        issuer_doc.update(
            authorization_endpoint=f"{ISSUER}/oauth2/authorize",
            token_endpoint=f"{ISSUER}/oauth2/token",
        )

        def fetch(url: str) -> dict[str, Any]:
            return issuer_doc if url.endswith("openid-configuration") else issuer(url)

        keys = IssuerKeys(ISSUER, fetch, clock)
        verifier = OidcVerifier(keys, jwt.Expected(ISSUER, CLIENT), "cognito:groups", clock)
        api.container.sign_in = verifier
        yield api


def person(key: SigningKey, clock: FixedClock, role: str, **changes: Any) -> dict[str, str]:
    groups = {"cognito:groups": [f"mcp-quota:demo:{role}"]}
    token = key.sign(claims(clock, email=f"{role}@demo.example", **groups, **changes))
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def blocked_session(api: Api, session: str) -> None:
    for _ in range(16):
        api.check(session_id=session, tool="delete_tag")


def test_a_viewer_reads_but_cannot_act(signed_in_api: Api, key: SigningKey) -> None:
    """Defect class: a read-only role that can change what it reads."""
    api, viewer = signed_in_api, person(key, signed_in_api.clock, "viewer")
    blocked_session(api, "v-1")
    for path in ("/v1/sessions", "/v1/sessions/v-1", "/v1/tenant", "/v1/audit", "/v1/grants"):
        assert api.get(path, viewer).status_code == 200, path

    for action in ("suspend", "reset", "resume"):
        answer = api.admin(f"/v1/sessions/v-1/{action}", {"reason": "x"}, viewer)
        assert answer.status_code == 403
        assert "A viewer may only read" in body(answer)["error"]["message"]
    raised = api.admin("/v1/principals/p/raise", {"category": "write", "add": 5}, viewer)
    assert raised.status_code == 403
    assert api.get("/v1/tokens", viewer).status_code == 403
    assert api.check(viewer, session_id="v-2", tool="get_tag").status_code == 403


def test_an_operator_acts_on_sessions_but_manages_no_tokens(
    signed_in_api: Api, key: SigningKey
) -> None:
    api, operator = signed_in_api, person(key, signed_in_api.clock, "operator")
    blocked_session(api, "o-1")

    suspended = api.admin("/v1/sessions/o-1/suspend", {"reason": "looping"}, operator)
    assert suspended.status_code == 200
    trail = body(api.get("/v1/audit?session_id=o-1", operator))["events"]
    assert trail[-1]["actor"] == "user:operator@demo.example (operator)"
    raised = api.admin(
        "/v1/sessions/o-1/raise", {"category": "write", "add": 5, "reason": "x"}, operator
    )
    assert raised.status_code == 200

    minted = api.admin("/v1/tokens", {"role": "server", "name": "x"}, operator)
    assert minted.status_code == 403
    assert "needs the admin role" in body(minted)["error"]["message"]


def test_an_admin_manages_tokens(signed_in_api: Api, key: SigningKey) -> None:
    api, admin = signed_in_api, person(key, signed_in_api.clock, "admin")
    created = api.admin("/v1/tokens", {"role": "viewer", "name": "dashboard"}, admin)

    assert created.status_code == 201
    assert body(created)["tenant"] == "demo"
    me = body(api.get("/v1/me", admin))
    assert (me["tenant"], me["role"], me["signed_in"]) == ("demo", "admin", True)
    assert me["permissions"] == ["check", "read", "act", "manage"]


def test_an_expired_or_foreign_token_is_refused(
    signed_in_api: Api, key: SigningKey, clock: FixedClock
) -> None:
    """Defect class: the authorizer's 30 s cache letting an expired token through."""
    api = signed_in_api
    viewer = person(key, clock, "viewer", exp=clock() // 1000 + 60)
    assert api.get("/v1/sessions", viewer).status_code == 200

    clock.advance(60 + jwt.LEEWAY_SECONDS)
    expired = api.get("/v1/sessions", viewer)
    assert expired.status_code == 401
    assert "expired token" in body(expired)["error"]["message"]

    stranger = person(key, clock, "admin", aud="another-app")
    assert api.get("/v1/sessions", stranger).status_code == 401
    forged = person(SigningKey("api-key"), clock, "admin")  # the kid, not the key
    assert api.get("/v1/sessions", forged).status_code == 403


def test_static_viewer_and_operator_tokens_hold_the_same_roles(signed_in_api: Api) -> None:
    api = signed_in_api
    _, viewer = api.token("demo", "viewer")
    _, operator = api.token("demo", "operator")
    blocked_session(api, "s-1")

    assert api.get("/v1/sessions/s-1", viewer).status_code == 200
    assert api.admin("/v1/sessions/s-1/suspend", {"reason": "x"}, viewer).status_code == 403
    assert api.admin("/v1/sessions/s-1/suspend", {"reason": "x"}, operator).status_code == 200
    assert api.check(operator, session_id="s-2", tool="get_tag").status_code == 403
    assert api.check(SERVER, session_id="s-2", tool="get_tag").status_code == 200


def test_the_console_learns_the_issuer_and_may_post_to_its_token_endpoint(
    signed_in_api: Api,
) -> None:
    config = body(signed_in_api.client.http.get("/v1/console-config"))["sign_in"]

    assert config == {
        "issuer": ISSUER,
        "client_id": CLIENT,
        "authorization_endpoint": f"{ISSUER}/oauth2/authorize",
        "token_endpoint": f"{ISSUER}/oauth2/token",
        "scope": "openid email profile",
    }
    page = signed_in_api.client.http.get("/console")
    assert "connect-src 'self' https://issuer.example;" in page.headers["Content-Security-Policy"]


def test_without_an_identity_provider_the_console_takes_a_token(api: Api) -> None:
    assert body(api.client.http.get("/v1/console-config")) == {"sign_in": None}
    page = api.client.http.get("/console")
    assert "connect-src 'self';" in page.headers["Content-Security-Policy"]
