"""What a server token (the token an MCP server, and so an agent, holds) is told when
it calls a route it may not: which routes it may call, found from the app itself."""

from __future__ import annotations

import importlib
import re

import pytest

import app as app_module
from chalicelib.auth.roles import Permission, refusal
from deploy.build_template import GATEWAY_ERRORS
from tests.api.conftest import SERVER, Api
from tests.support import ROOT


def _routes_a_server_token_reaches(api: Api) -> tuple[list[str], list[str]]:
    """(`METHOD path` the authorizer lets a server token reach, those it refuses)."""
    reached: list[str] = []
    refused: list[str] = []
    for path, methods in app_module.app.routes.items():
        for method, entry in methods.items():
            if entry.authorizer is None:
                continue
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            answer = api.client.http.request(method, concrete, headers=SERVER, body=b"{}")
            gateway_refused = b"not authorized to access this resource" in answer.body
            (refused if gateway_refused else reached).append(f"{method} {path}")
    return reached, refused


def _local_gateway_message(monkeypatch: pytest.MonkeyPatch) -> str:
    """`make run`'s 403 for a token the authorizer refused (scripts/ is no package)."""
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    local_gateway = importlib.import_module("local_gateway")
    return str(local_gateway.error_message(403, "GET", "/v1/approvals"))


def test_a_refused_server_token_is_told_every_route_it_may_call(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each 403 a server token can meet on a route it may not call (the deployed
    gateway's, `make run`'s, a route's own) names every route it may call. (Defect class:
    a 403 that says what the token lacks but not what it is for, so an integrator
    guesses, and a list that drifts from the authorizer's.)"""
    reached, refused = _routes_a_server_token_reaches(api)
    assert "POST /v1/check" in reached and "POST /v1/approvals/{approval_id}/approve" in refused
    messages = [
        GATEWAY_ERRORS["ACCESS_DENIED"].message,
        _local_gateway_message(monkeypatch),
        *(refusal("server", p) for p in Permission if p is not Permission.CHECK),
    ]
    for message in messages:
        assert len(message) < 300, message
        for route in reached:
            assert route in message, (route, message)


@pytest.mark.parametrize("permission", [Permission.READ, Permission.ACT])
def test_a_viewer_is_still_told_it_may_only_read(permission: Permission) -> None:
    """The server's list is for server tokens: a viewer's refusal stays its own."""
    assert refusal("viewer", permission).endswith("A viewer may only read.")
    assert "POST /v1/check" not in refusal("viewer", permission)
