"""Session identity and call-id resolution: the documented order, as pure functions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from mcp_quota_client import (
    META_CALL_ID_KEY,
    META_SESSION_KEY,
    CallerInfo,
    SessionKeying,
    SessionSource,
    resolve_call_id,
    resolve_session,
)
from mcp_quota_client.decision import ClientInfo
from mcp_quota_client.session import principal_from_token, safe_key, token_identity

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


def test_a_transport_session_is_no_budget_boundary_unless_session_from_transport() -> None:
    """Defect class: a budget keyed on a per-connection id (a fresh budget per call for
    a client that connects per call, issue 31)."""
    one = CallerInfo(meta={"other": 1}, transport_session_id="abc", transport=HTTP)
    other = CallerInfo(meta={"other": 1}, transport_session_id="xyz", transport=HTTP)

    assert resolve_session(one).source is SessionSource.DERIVED
    assert resolve_session(one) == resolve_session(other)
    keyed = resolve_session(one, SessionKeying.TRANSPORT)
    assert (keyed.session_id, keyed.source) == ("mcp:abc", SessionSource.TRANSPORT)


def test_only_a_derived_session_asks_the_service_to_mint_one() -> None:
    derived = resolve_session(CallerInfo(principal="alice"))
    named = resolve_session(CallerInfo(meta={META_SESSION_KEY: "run-1"}, principal="alice"))
    echoed = resolve_session(CallerInfo(meta={META_SESSION_KEY: "mqs1-k.p.s"}))
    legacy = CallerInfo(transport_session_id="abc", transport=HTTP)
    transport = resolve_session(legacy, SessionKeying.TRANSPORT)
    principal = resolve_session(CallerInfo(principal="alice"), SessionKeying.PRINCIPAL)
    assert [i.mint for i in (derived, named, echoed, transport, principal)] == [
        True,
        False,
        False,
        False,
        False,
    ]


def test_a_legacy_transport_session_is_sent_to_be_shown_beside_any_session() -> None:
    legacy = CallerInfo(
        meta={META_SESSION_KEY: "run-1"}, transport_session_id="abc", transport=HTTP
    )
    assert resolve_session(legacy).transport == "abc"
    assert resolve_session(CallerInfo(transport_session_id="x" * 300)).transport == (
        safe_key("x" * 300, 128)
    )
    assert resolve_session(CallerInfo()).transport is None


def test_without_a_named_session_the_key_is_derived_from_who_calls() -> None:
    alice_a = CallerInfo(principal="alice", transport=HTTP, peer="10.0.0.1")
    alice_again = CallerInfo(principal="alice", transport=HTTP, peer="10.0.0.9", request_id=9)
    bob_a = CallerInfo(principal="bob", transport=HTTP, peer="10.0.0.1")
    alice_other_client = CallerInfo(principal="alice", client=ClientInfo(name="other"))

    first = resolve_session(alice_a)

    assert first.source is SessionSource.DERIVED
    assert first.session_id.startswith("derived:")
    assert resolve_session(alice_again) == first  # another connection, same agent
    assert resolve_session(bob_a) != first
    assert resolve_session(alice_other_client) != first


def test_the_oauth_client_id_names_the_client_before_its_own_name() -> None:
    cimd = "https://app.example/client.json"
    one = CallerInfo(client=ClientInfo(name="claude", oauth_client_id=cimd))
    renamed = CallerInfo(client=ClientInfo(name="claude-2", oauth_client_id=cimd))

    assert resolve_session(one) == resolve_session(renamed)


def test_without_a_principal_the_server_token_is_who_calls() -> None:
    one = CallerInfo(server_identity=token_identity("token-a"))
    two = CallerInfo(server_identity=token_identity("token-b"))

    assert resolve_session(one) != resolve_session(two)
    assert "token-a" not in token_identity("token-a")


def test_a_minted_session_echoed_back_is_sent_for_the_service_to_verify() -> None:
    minted = "mqs1-abcd.payload.sig"
    caller = CallerInfo(meta={META_SESSION_KEY: minted}, principal="alice")

    identity = resolve_session(caller)

    assert identity.source is SessionSource.MINTED
    assert identity.minted == minted
    # The key sent beside it is the derived one: what a service that mints none uses.
    assert identity.session_id == resolve_session(CallerInfo(principal="alice")).session_id


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


def test_a_json_rpc_id_is_never_an_idempotency_key() -> None:
    """Defect class: a retry key that changes on retry (2026-07-28 re-sends a call with a
    new JSON-RPC id) or repeats across connections (ids restart at each one)."""
    assert resolve_call_id(CallerInfo(transport_session_id="t1", request_id=3)) is None
    assert resolve_call_id(CallerInfo(request_id=3, transport=HTTP)) is None


def test_an_mrtr_retry_is_the_call_its_sealed_state_names() -> None:
    assert resolve_call_id(CallerInfo(state_call_id="gen-1", request_id=4)) == "gen-1"
    both = CallerInfo(meta={META_CALL_ID_KEY: "mine"}, state_call_id="gen-1")
    assert resolve_call_id(both) == "mine"


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


_text = st.one_of(st.none(), st.text(max_size=12))
_meta = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            META_SESSION_KEY: st.one_of(st.text(max_size=20), st.just("mqs1-x.y.z")),
            META_CALL_ID_KEY: st.text(max_size=12),
        },
    ),
)


@given(
    meta=_meta,
    principal=_text,
    server=_text,
    client=st.one_of(st.none(), st.builds(ClientInfo, name=_text, oauth_client_id=_text)),
    keying=st.sampled_from([SessionKeying.CLIENT, SessionKeying.PRINCIPAL]),
    connection_a=st.tuples(_text, st.one_of(st.none(), st.integers()), _text, _text),
    connection_b=st.tuples(_text, st.one_of(st.none(), st.integers()), _text, _text),
)
def test_the_session_and_call_are_functions_of_who_calls_never_of_the_connection(
    meta: dict[str, str] | None,
    principal: str | None,
    server: str | None,
    client: ClientInfo | None,
    keying: SessionKeying,
    connection_a: tuple[str | None, int | None, str | None, str | None],
    connection_b: tuple[str | None, int | None, str | None, str | None],
) -> None:
    """Defect class: a session or retry key that moves with the JSON-RPC id, the
    transport session, the transport or the peer (outside `session_from: transport`)."""

    def caller(connection: tuple[str | None, int | None, str | None, str | None]) -> CallerInfo:
        transport_session, request_id, transport, peer = connection
        return CallerInfo(
            meta=meta,
            principal=principal,
            server_name=server,
            client=client,
            transport_session_id=transport_session,
            request_id=request_id,
            transport=transport,
            peer=peer,
        )

    a, b = caller(connection_a), caller(connection_b)
    assert resolve_session(a, keying) == resolve_session(b, keying)
    assert resolve_call_id(a) == resolve_call_id(b)
