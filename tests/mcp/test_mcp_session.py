"""Session identity and call-id resolution: the documented order, as pure functions."""

from __future__ import annotations

from mcp_quota_client import (
    META_CALL_ID_KEY,
    META_SESSION_KEY,
    CallerInfo,
    SessionKeying,
    SessionSource,
    resolve_call_id,
    resolve_session,
)
from mcp_quota_client.session import principal_from_token, safe_key

HTTP = "streamable-http"


def test_an_explicit_meta_session_wins_over_everything_else() -> None:
    caller = CallerInfo(
        meta={META_SESSION_KEY: "agent-run-42"},
        transport_session_id="abc",
        principal="alice",
        transport=HTTP,
        peer="10.0.0.1",
    )

    identity = resolve_session(caller)

    assert identity.session_id == "agent-run-42"
    assert identity.source is SessionSource.META


def test_the_transport_session_is_used_when_the_client_names_none() -> None:
    caller = CallerInfo(meta={"other": 1}, transport_session_id="abc", transport=HTTP)

    identity = resolve_session(caller)

    assert identity.session_id == "mcp:abc"
    assert identity.source is SessionSource.TRANSPORT


def test_without_either_the_key_is_derived_from_principal_and_connection() -> None:
    alice_a = CallerInfo(principal="alice", transport=HTTP, peer="10.0.0.1")
    alice_again = CallerInfo(principal="alice", transport=HTTP, peer="10.0.0.1", request_id=9)
    bob_a = CallerInfo(principal="bob", transport=HTTP, peer="10.0.0.1")
    alice_b = CallerInfo(principal="alice", transport=HTTP, peer="10.0.0.2")

    first = resolve_session(alice_a)

    assert first.source is SessionSource.DERIVED
    assert first.session_id.startswith("derived:")
    assert resolve_session(alice_again) == first
    assert resolve_session(bob_a) != first
    assert resolve_session(alice_b) != first


def test_on_stdio_the_server_process_is_the_connection() -> None:
    caller = CallerInfo(transport="stdio")

    one = resolve_session(caller, process_key="process-1")
    same = resolve_session(caller, process_key="process-1")
    other = resolve_session(caller, process_key="process-2")

    assert one == same
    assert one != other


def test_principal_keying_ignores_ids_the_client_controls() -> None:
    caller = CallerInfo(
        meta={META_SESSION_KEY: "fresh-after-reconnect"},
        transport_session_id="new-transport-session",
        principal="alice",
        transport=HTTP,
    )

    identity = resolve_session(caller, SessionKeying.PRINCIPAL)

    assert identity.session_id == "principal:alice"
    assert identity.source is SessionSource.PRINCIPAL
    anonymous = CallerInfo(meta={META_SESSION_KEY: "x"}, transport=HTTP, peer="10.0.0.1")
    assert resolve_session(anonymous, SessionKeying.PRINCIPAL).source is SessionSource.DERIVED


def test_keys_outside_the_service_charset_are_hashed_stably() -> None:
    assert safe_key("plain-ascii_1", 256) == "plain-ascii_1"
    hashed = safe_key("séance 1", 256)
    assert hashed.startswith("sha256:")
    assert hashed == safe_key("séance 1", 256)
    assert safe_key("x" * 300, 256).startswith("sha256:")
    unicode_meta = CallerInfo(meta={META_SESSION_KEY: "セッション"})
    assert resolve_session(unicode_meta).session_id.startswith("sha256:")


def test_an_explicit_call_id_is_the_idempotency_key() -> None:
    caller = CallerInfo(meta={META_CALL_ID_KEY: "retry-me"}, transport_session_id="t", request_id=3)

    assert resolve_call_id(caller) == "retry-me"


def test_a_json_rpc_id_counts_only_within_its_transport_session() -> None:
    first = resolve_call_id(CallerInfo(transport_session_id="t1", request_id=3))
    other_session = resolve_call_id(CallerInfo(transport_session_id="t2", request_id=3))

    assert first is not None
    assert first.startswith("rpc:")
    assert first.endswith(":3")
    assert first != other_session


def test_a_bare_json_rpc_id_is_never_an_idempotency_key() -> None:
    # Ids restart on every connection: a reused one would replay an old "allowed".
    assert resolve_call_id(CallerInfo(request_id=3, transport=HTTP)) is None


def test_principal_prefers_the_subject_then_the_client_id() -> None:
    assert principal_from_token("client-app", "alice@example.com") == "alice@example.com"
    assert principal_from_token("client-app", None) == "client-app"
    assert principal_from_token(None, None) is None


def test_two_mcp_servers_never_share_a_derived_key() -> None:
    articles = CallerInfo(transport=HTTP, peer="10.0.0.1", server_name="articles")
    billing = CallerInfo(transport=HTTP, peer="10.0.0.1", server_name="billing")

    assert resolve_session(articles) != resolve_session(billing)
    assert resolve_session(articles) == resolve_session(
        CallerInfo(transport=HTTP, peer="10.0.0.1", server_name="articles", request_id=2)
    )
