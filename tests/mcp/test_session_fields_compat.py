"""A quota service from before minted sessions (issue 31) answers 400 naming
`mint_session` or `transport_session_id`: the client asks again without, and leaves them
out from then on; the call is counted once, in the session it derived."""

from __future__ import annotations

import pytest
from mcp_quota_client import CheckRequest

from tests.mcp.conftest import ClientFactory, FakeQuotaService

pytestmark = pytest.mark.anyio

DERIVED = CheckRequest(
    session_id="derived:abc",
    tool="delete_tag",
    mint_session=True,
    transport_session_id="legacy-1",
)


async def test_a_service_without_minting_is_asked_again_without_the_fields(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    quota_service.accepts_minting = False
    client = make_client()
    for _ in range(2):
        decision = await client.check(DERIVED)
        assert decision.allowed is True
        assert decision.session_token is None
    sent = [(b.get("mint_session"), b.get("transport_session_id")) for b in quota_service.bodies()]
    # The first check asked twice (each field rejected in turn), the second once, bare.
    assert sent == [(True, "legacy-1"), (None, "legacy-1"), (None, None), (None, None)]
    assert quota_service.used[("derived:abc", "write")] == 2


async def test_a_service_with_minting_gets_the_fields(
    quota_service: FakeQuotaService, make_client: ClientFactory
) -> None:
    await make_client().check(DERIVED)
    [body] = quota_service.bodies()
    assert body["mint_session"] is True
    assert body["transport_session_id"] == "legacy-1"
