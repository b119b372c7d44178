"""The authorization matrix: every endpoint x every kind of caller, the status asserted.

Gateway-level denials (the authorizer, before the service runs): 401 without a header,
403 for an unknown token and for a server token on an admin route; 401 on every route
for a revoked admin token, at once (the route reads it again, past any cache). An admin
of another tenant never sees this tenant's sessions or grants: 404, or its own, new one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.api.conftest import ADMIN, SERVER, Api, body

SESSION = "owned-by-demo"
REASON = {"reason": "matrix"}
GRANT = {
    "principal": "editor@example.com",
    "category": "write",
    "limit": 20,
    "starts_at": "2026-12-02T11:00:00Z",
    "ends_at": "2026-12-02T14:00:00Z",
    "reason": "matrix",
}

# (method, path, body); {grant} and {token} are ids of a grant and a token demo owns.
ENDPOINTS: dict[str, tuple[str, str, Any]] = {
    "health": ("GET", "/health", None),
    "check": ("POST", "/v1/check", {"session_id": SESSION, "tool": "delete_tag"}),
    "return_lease": (
        "POST",
        "/v1/leases/return",
        {"session_id": SESSION, "lease": "read.abcdef.3.0.0", "unused": 2},
    ),
    "show": ("GET", f"/v1/sessions/{SESSION}", None),
    "raise": ("POST", f"/v1/sessions/{SESSION}/raise", {"category": "write", "add": 5, **REASON}),
    "suspend": ("POST", f"/v1/sessions/{SESSION}/suspend", REASON),
    "resume": ("POST", f"/v1/sessions/{SESSION}/resume", REASON),
    "reset": ("POST", f"/v1/sessions/{SESSION}/reset", REASON),
    "lower": ("POST", f"/v1/sessions/{SESSION}/lower", {"category": "write", **REASON}),
    "list_sessions": ("GET", "/v1/sessions", None),
    "add_grant": ("POST", "/v1/grants", GRANT),
    "list_grants": ("GET", "/v1/grants", None),
    "delete_grant": ("DELETE", "/v1/grants/{grant}", None),
    "audit": ("GET", "/v1/audit", None),
    "show_principal": ("GET", "/v1/principals/bot", None),
    "raise_principal": (
        "POST",
        "/v1/principals/bot/raise",
        {"category": "write", "add": 5, **REASON},
    ),
    "suspend_principal": ("POST", "/v1/principals/bot/suspend", REASON),
    "resume_principal": ("POST", "/v1/principals/bot/resume", REASON),
    "reset_principal": ("POST", "/v1/principals/bot/reset", REASON),
    "tenant": ("GET", "/v1/tenant", None),
    "create_token": ("POST", "/v1/tokens", {"role": "server", "name": "matrix"}),
    "list_tokens": ("GET", "/v1/tokens", None),
    "revoke_token": ("DELETE", "/v1/tokens/{token}", None),
}

SERVER_ROUTES = ("check", "return_lease")
ADMIN_ONLY = [name for name in ENDPOINTS if name not in ("health", *SERVER_ROUTES)]

# The expected status of each endpoint for each caller.
EXPECTED: dict[str, dict[str, int]] = {
    "no token": {"health": 200, **dict.fromkeys([*SERVER_ROUTES, *ADMIN_ONLY], 401)},
    "bad token": {"health": 200, **dict.fromkeys([*SERVER_ROUTES, *ADMIN_ONLY], 403)},
    # A revoked admin token: 401 on every route at once (the route re-reads admin tokens).
    "revoked token": {"health": 200, **dict.fromkeys([*SERVER_ROUTES, *ADMIN_ONLY], 401)},
    "server token": {
        "health": 200,
        **dict.fromkeys(SERVER_ROUTES, 200),
        **dict.fromkeys(ADMIN_ONLY, 403),
    },
    "admin of another tenant": {
        "health": 200,
        "check": 200,  # counts in its own tenant
        "return_lease": 200,  # nothing to give back in its own tenant
        "show": 404,
        "raise": 200,  # raises its own (new) session of that name, never demo's
        "suspend": 200,  # likewise: its own session
        "resume": 404,
        "reset": 404,
        "lower": 404,
        "list_sessions": 200,  # its own (empty) listing
        "add_grant": 201,
        "list_grants": 200,
        "delete_grant": 404,
        "audit": 200,
        "show_principal": 200,  # its own principal of that name: zeros
        "raise_principal": 200,  # its own
        "suspend_principal": 200,  # its own
        "resume_principal": 404,
        "reset_principal": 404,
        "tenant": 200,  # its own
        "create_token": 201,  # in its own tenant
        "list_tokens": 200,  # its own
        "revoke_token": 404,
    },
    "admin token": {
        "health": 200,
        "check": 200,
        "return_lease": 200,
        "show": 200,
        "raise": 200,
        "suspend": 200,
        "resume": 200,
        "reset": 200,
        "lower": 409,  # the session has no raise in force: nothing to lower
        "list_sessions": 200,
        "add_grant": 201,
        "list_grants": 200,
        "delete_grant": 200,
        "audit": 200,
        "create_token": 201,
        "list_tokens": 200,
        "revoke_token": 200,
        **dict.fromkeys(
            [
                "show_principal",
                "raise_principal",
                "suspend_principal",
                "resume_principal",
                "reset_principal",
                "tenant",
            ],
            200,
        ),
    },
}


def headers_for(api: Api, caller: str) -> dict[str, str]:
    """Credentials for one kind of caller."""
    json_only = {"Content-Type": "application/json"}
    make: dict[str, Callable[[], dict[str, str]]] = {
        "no token": lambda: json_only,
        "bad token": lambda: {**json_only, "Authorization": "Bearer mcpq_nope_" + "x" * 40},
        "revoked token": lambda: revoked(api),
        "server token": lambda: SERVER,
        "admin of another tenant": lambda: api.token("acme", "admin")[1],
        "admin token": lambda: ADMIN,
    }
    return make[caller]()


def revoked(api: Api) -> dict[str, str]:
    token_id, headers = api.token("demo", "admin")
    assert api.get("/v1/grants", headers).status_code == 200  # valid before revocation
    api.container.tokens.revoke(token_id, api.clock())
    return headers


def call(api: Api, method: str, path: str, payload: Any, headers: dict[str, str]) -> Any:
    http = api.client.http
    if method == "GET":
        return http.get(path, headers=headers)
    if method == "DELETE":
        return http.delete(path, headers=headers)
    return api.post(path, payload, headers)


CELLS = [(caller, name) for caller in EXPECTED for name in ENDPOINTS]


@pytest.mark.parametrize(("caller", "endpoint"), CELLS, ids=[f"{c}-{e}" for c, e in CELLS])
def test_authorization_matrix(api: Api, caller: str, endpoint: str) -> None:
    assert api.check(session_id=SESSION, tool="delete_tag").status_code == 200
    assert api.check(session_id="b", tool="delete_tag", principal="bot").status_code == 200
    grant = body(api.admin("/v1/grants", GRANT))["grant"]["grant_id"]
    token, _ = api.token("demo", "server")
    headers = headers_for(api, caller)
    method, path, payload = ENDPOINTS[endpoint]
    response = call(api, method, path.format(grant=grant, token=token), payload, headers)
    assert response.status_code == EXPECTED[caller][endpoint], response.body
    if response.status_code == 404:
        assert body(response)["error"]["code"] == "not_found"


def test_another_tenants_admin_changed_nothing_of_demo(api: Api) -> None:
    assert api.check(session_id=SESSION, tool="delete_tag").status_code == 200
    grant = body(api.admin("/v1/grants", GRANT))["grant"]["grant_id"]
    token, server = api.token("demo", "server")
    other = headers_for(api, "admin of another tenant")
    assert api.check(session_id="b", tool="delete_tag", principal="bot").status_code == 200
    names = ("raise", "suspend", "resume", "reset", "delete_grant", "create_token", "revoke_token")
    for name in (*names, "suspend_principal", "reset_principal", "raise_principal"):
        method, path, payload = ENDPOINTS[name]
        call(api, method, path.format(grant=grant, token=token), payload, other)
    session = body(api.get(f"/v1/sessions/{SESSION}"))
    assert session["state"] == "active"
    assert session["categories"]["write"]["used"] == 1
    assert session["categories"]["write"]["limit"] == 15
    assert [g["grant_id"] for g in body(api.get("/v1/grants"))["grants"]] == [grant]
    bot = body(api.get("/v1/principals/bot"))
    assert bot["state"] == "active" and bot["categories"]["write"]["used"] == 1
    assert bot["categories"]["write"]["limit"] == 100
    assert [t["token_id"] for t in body(api.get("/v1/tokens"))["tokens"]] == [token]
    assert api.check(server, session_id="c", tool="delete_tag").status_code == 200
