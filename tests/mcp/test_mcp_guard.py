"""The guard core both adapters call: set-up, the check, the refusal and the meta."""

from __future__ import annotations

import pytest
from mcp_quota_client import (
    META_DECISION_KEY,
    CallerInfo,
    QuotaConfigError,
    SessionKeying,
    SessionSource,
    ToolAnnotations,
)
from mcp_quota_client.guard import ToolCallGuard

from tests.mcp.conftest import ClientFactory, FakeQuotaService

pytestmark = pytest.mark.anyio

DESTRUCTIVE: ToolAnnotations = {"destructiveHint": True}


def guard(client_factory: ClientFactory, **options: object) -> ToolCallGuard:
    settings: dict[str, object] = {
        "keying": SessionKeying.CLIENT,
        "categories": None,
        "principal_resolver": None,
        "default_principal": lambda: "alice",
        "attach_decision_meta": True,
        "server_name": None,
    }
    settings.update(options)
    return ToolCallGuard.create(client_factory(), **settings)  # type: ignore[arg-type]


async def test_an_allowed_call_carries_its_decision_meta_and_no_refusal(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    core = guard(make_client)

    guarded = await core.decide("delete_tag", DESTRUCTIVE, CallerInfo(principal="alice"))

    assert guarded.refusal is None
    assert guarded.meta is not None
    assert guarded.meta[META_DECISION_KEY]["used"] == 1
    [body] = quota_service.bodies()
    assert body["principal"] == "alice"


async def test_a_refused_call_carries_the_text_and_structured_content(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.limits["write"] = 1
    core = guard(make_client, attach_decision_meta=False)
    caller = CallerInfo(transport="stdio")

    first = await core.decide("delete_tag", DESTRUCTIVE, caller)
    second = await core.decide("delete_tag", DESTRUCTIVE, caller)

    assert first.meta is None  # attach_decision_meta=False
    assert second.refusal is not None
    assert "was NOT run" in second.refusal.text
    assert second.refusal.structured["kind"] == "quota_exceeded"
    assert second.refusal.structured["used"] == 1


async def test_categories_and_the_explicit_server_name_reach_the_check(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    named = guard(make_client, categories={"delete_tag": "read"}, server_name="articles-eu")
    caller = CallerInfo(transport="stdio", server_name="ignored-framework-name")
    other = CallerInfo(transport="stdio", server_name="articles-us")

    first = await named.decide("delete_tag", DESTRUCTIVE, caller)
    second = await guard(make_client).decide("delete_tag", DESTRUCTIVE, other)

    assert first.identity.source is SessionSource.DERIVED
    assert first.identity.session_id != second.identity.session_id
    bodies = quota_service.bodies()
    assert bodies[0]["category"] == "read"


def test_without_a_client_or_the_environment_the_guard_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("MCP_QUOTA_URL", raising=False)
    monkeypatch.setenv("MCP_QUOTA_TOKEN", "t")

    with pytest.raises(QuotaConfigError, match=r"^mcp-quota: MCP_QUOTA_URL is not set"):
        ToolCallGuard.create(
            None,
            keying=SessionKeying.CLIENT,
            categories=None,
            principal_resolver=None,
            default_principal=lambda: None,
            attach_decision_meta=True,
            server_name=None,
        )
