"""A revoked admin token stops changing things at once; checks keep a cache of at most
60 s; tokens may expire (chalicelib/auth/authorizer.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from chalice.app import ChaliceAuthorizer

import app as app_module
from chalicelib.auth.authorizer import AUTHORIZER_TTL_SECONDS
from chalicelib.auth.tokens import hash_secret, new_token
from chalicelib.settings import TOKEN_CACHE_MAX_SECONDS, Settings
from chalicelib.storage.records import TokenRecord
from tests.api.conftest import ADMIN, Api, body, running_api
from tests.support import FixedClock

SERVER_TOKEN = {"role": "server", "name": "articles MCP server"}
WRITE = {"session_id": "s1", "tool": "delete_tag", "category": "write"}


@pytest.fixture(params=["memory", "dynamodb"])
def cached_api(request: pytest.FixtureRequest, clock: FixedClock) -> Iterator[Api]:
    """The API with the production token cache, on memory and on moto's DynamoDB."""
    with running_api(
        clock, request.param, token_cache_seconds=Settings.from_env({}).token_cache_seconds
    ) as api:
        yield api


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def mint(api: Api, headers: dict[str, str]) -> Any:
    return api.admin("/v1/tokens", SERVER_TOKEN, headers)


def stored_token(api: Api, role: str, expires_at_ms: int | None = None) -> tuple[str, str]:
    token_id, token = new_token()
    record = TokenRecord(
        token_id,
        hash_secret(token),
        "demo",
        role,
        "test",
        api.clock(),
        expires_at_ms=expires_at_ms,
    )
    api.container.tokens.put(record)
    return token_id, token


def test_the_bound_on_a_cached_token_is_60_seconds() -> None:
    (authorizer,) = app_module.app.builtin_auth_handlers
    assert authorizer.ttl_seconds == AUTHORIZER_TTL_SECONDS
    assert AUTHORIZER_TTL_SECONDS + TOKEN_CACHE_MAX_SECONDS <= 60
    assert Settings.from_env({}).token_cache_seconds == TOKEN_CACHE_MAX_SECONDS


def test_a_token_revoked_through_the_api_mints_nothing_more(cached_api: Api) -> None:
    api = cached_api
    created = body(api.admin("/v1/tokens", {"role": "admin", "name": "second"}))
    admin = bearer(created["token"])
    assert mint(api, admin).status_code == 201  # its identity is now cached here

    revoked = api.client.http.delete(f"/v1/tokens/{created['token_id']}", headers=ADMIN)
    assert revoked.status_code == 200

    refused = mint(api, admin)
    assert refused.status_code == 401, refused.body
    assert body(refused)["error"]["code"] == "unauthorized"
    # The fresh look-up refreshed this container's cache: from now on the authorizer
    # refuses the token too (403), and API Gateway's cached answer meets the route's 401.
    for path, payload in (
        ("/v1/sessions/s1/suspend", {"reason": "x"}),
        ("/v1/sessions/s1/raise", {"category": "write", "by": 5}),
        ("/v1/principals/bot-1/suspend", {"reason": "x"}),
    ):
        assert api.admin(path, payload, admin).status_code in (401, 403), path


def test_a_token_revoked_elsewhere_mints_nothing_more(cached_api: Api) -> None:
    api = cached_api
    token_id, token = stored_token(api, "admin")
    admin = bearer(token)
    assert mint(api, admin).status_code == 201
    # Another process revokes it: this container's cache still holds the identity.
    api.container.tokens.revoke(token_id, api.clock())
    assert mint(api, admin).status_code == 401
    assert api.client.http.delete(f"/v1/tokens/{token_id}", headers=admin).status_code in (
        401,
        403,
    )


def test_checks_stop_within_the_cache_bound(cached_api: Api) -> None:
    api = cached_api
    token_id, token = stored_token(api, "server")
    server = bearer(token)
    assert api.check(server, **WRITE).status_code == 200
    api.container.tokens.revoke(token_id, api.clock())
    api.clock.advance(TOKEN_CACHE_MAX_SECONDS)
    assert api.check(server, **WRITE).status_code == 403


def test_an_expired_token_stops_at_its_expiry_whatever_the_cache(cached_api: Api) -> None:
    api = cached_api
    _, server_token = stored_token(api, "server", expires_at_ms=api.clock() + 5_000)
    _, admin_token = stored_token(api, "admin", expires_at_ms=api.clock() + 5_000)
    server, admin = bearer(server_token), bearer(admin_token)
    assert api.check(server, **WRITE).status_code == 200
    assert mint(api, admin).status_code == 201

    api.clock.advance(5)

    assert api.check(server, **WRITE).status_code == 403
    assert mint(api, admin).status_code in (401, 403)


READS = (
    "/v1/sessions",
    "/v1/sessions/s1",
    "/v1/principals/bot-1",
    "/v1/tenant",
    "/v1/grants",
    "/v1/tokens",
    "/v1/audit",
    "/v1/shadow",
)


@pytest.mark.parametrize("how", ["revoked", "expired"])
def test_a_refused_admin_token_answers_401_on_every_route_at_once(
    cached_api: Api, how: str
) -> None:
    """Defect class: an admin route that only reads trusted the authorizer's and the
    container's cached identity, so a revoked admin token kept read access until its first
    write. Every route now answers 401 from the first request after the revocation, and
    keeps answering 401 once the caches have learnt it (never a 403 from the authorizer)."""
    api = cached_api
    expires = api.clock() + 5_000 if how == "expired" else None
    token_id, token = stored_token(api, "admin", expires_at_ms=expires)
    admin = bearer(token)
    assert api.check(**WRITE).status_code == 200
    for path in READS:  # the token's identity is now cached by the container
        assert api.get(path, admin).status_code == 200, path
    if how == "revoked":
        api.container.tokens.revoke(token_id, api.clock())
    else:
        api.clock.advance(5)
    for _ in range(2):  # the first pass refreshes the caches; the second meets them
        for path in READS:
            refused = api.get(path, admin)
            assert refused.status_code == 401, (path, refused.body)
            assert body(refused)["error"]["code"] == "unauthorized"
        assert api.check(admin, **WRITE).status_code == 401
        assert api.admin("/v1/sessions/s1/suspend", {"reason": "x"}, admin).status_code == 401
        deleted = api.client.http.delete(f"/v1/tokens/{token_id}", headers=admin)
        assert deleted.status_code == 401


def test_the_gateways_cached_answer_never_outlives_a_tokens_expiry(
    cached_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect class: a cache that outlives what it caches. API Gateway keeps the
    authorizer's allow AUTHORIZER_TTL_SECONDS; a token expiring inside that window must
    stop checking at its expiry, not up to 30 s later."""
    api = cached_api
    authorizer = app_module.app.routes["/v1/check"]["POST"].authorizer
    assert isinstance(authorizer, ChaliceAuthorizer)
    real = authorizer.func
    kept: dict[str, tuple[int, Any]] = {}

    def gateway_cached(request: Any) -> Any:  # the gateway's cache, keyed by the header
        hit = kept.get(request.token)
        if hit is None or hit[0] <= api.clock():
            hit = (api.clock() + AUTHORIZER_TTL_SECONDS * 1000, real(request))
            kept[request.token] = hit
        return hit[1]

    monkeypatch.setattr(authorizer, "func", gateway_cached)
    _, token = stored_token(api, "server", expires_at_ms=api.clock() + 10_000)
    assert api.check(bearer(token), **WRITE).status_code == 200
    api.clock.advance(9.999)
    assert api.check(bearer(token), **WRITE).status_code == 200
    api.clock.advance(0.001)
    refused = api.check(bearer(token), **WRITE)
    assert refused.status_code == 403
    assert "expired" in body(refused)["error"]["message"]
    assert len(kept) == 1  # the gateway's answer was the cached one throughout
