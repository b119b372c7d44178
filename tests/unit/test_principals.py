"""Issue 11, item 5: a check's principal is one its token may act for."""

from __future__ import annotations

import pytest

from chalicelib.auth.tokens import (
    ANY_PRINCIPAL,
    SERVER,
    Identity,
    decode_principals,
    effective_principal,
    encode_principals,
)
from chalicelib.errors import Forbidden, PrincipalNotAllowed

UNBOUND = Identity("demo", SERVER, "1a2b3c4d5e6f")
BOUND = Identity("demo", SERVER, "0f0f0f0f0f0f", principals=("editor@example.com", "bot-*"))
DEV = Identity("demo", SERVER, "dev-server", principals=ANY_PRINCIPAL)


@pytest.mark.parametrize("identity", [UNBOUND, BOUND, DEV])
def test_no_claim_is_the_tokens_own_principal(identity: Identity) -> None:
    own = f"token:{identity.token_id}"
    assert effective_principal(identity, None) == own
    assert effective_principal(identity, own) == own  # claiming itself is no claim


@pytest.mark.parametrize("claim", ["editor@example.com", "bot-1", "bot-", "bot-*"])
def test_a_bound_token_may_claim_its_names_and_patterns(claim: str) -> None:
    assert effective_principal(BOUND, claim) == claim


@pytest.mark.parametrize(
    "claim", ["bot", "Bot-1", "editor@example.org", "xbot-1", "EDITOR@example.com"]
)
def test_a_claim_outside_the_binding_is_refused_naming_token_and_principal(claim: str) -> None:
    with pytest.raises(PrincipalNotAllowed) as refused:
        effective_principal(BOUND, claim)
    error = refused.value
    assert isinstance(error, Forbidden) and error.STATUS_CODE == 403
    assert error.CODE == "principal_not_allowed"
    assert "Token 0f0f0f0f0f0f" in error.message and repr(claim) in error.message
    assert "'editor@example.com', 'bot-*'" in error.message


def test_an_unbound_token_may_claim_nothing() -> None:
    with pytest.raises(PrincipalNotAllowed) as refused:
        effective_principal(UNBOUND, "bot")
    message = refused.value.message
    assert message.startswith(
        "Token 1a2b3c4d5e6f may not act for principal 'bot': its allowed principals are none."
    )
    assert "'token:1a2b3c4d5e6f'" in message and "POST /v1/tokens" in message


@pytest.mark.parametrize("claim", ["anyone", "a b", "*", "ops@example.com"])
def test_the_dev_server_token_may_claim_any_principal(claim: str) -> None:
    assert effective_principal(DEV, claim) == claim


@pytest.mark.parametrize("identity", [DEV, BOUND, UNBOUND])
def test_no_token_may_claim_another_tokens_own_principal(identity: Identity) -> None:
    with pytest.raises(PrincipalNotAllowed, match="reserved"):
        effective_principal(identity, "token:1234567890ab")


def test_a_long_binding_is_named_in_part() -> None:
    many = Identity("demo", SERVER, "0f0f0f0f0f0f", principals=tuple(f"p{i}" for i in range(32)))
    with pytest.raises(PrincipalNotAllowed) as refused:
        effective_principal(many, "bot")
    assert "'p4' and 27 more" in refused.value.message and "'p5'" not in refused.value.message


@pytest.mark.parametrize("principals", [(), ("*",), ("a", 'quo"te', "b[0-9]*", "\\x")])
def test_principals_survive_the_authorizer_context(principals: tuple[str, ...]) -> None:
    encoded = encode_principals(principals)
    assert isinstance(encoded, str)
    assert decode_principals(encoded) == principals


def test_a_context_without_principals_binds_nothing() -> None:
    assert decode_principals(None) == () and decode_principals("") == ()
