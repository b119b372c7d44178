"""The authorizer accepts one header shape per token, `Bearer <token>` with the scheme in
any ASCII case: the defect class is a rate key that one token escapes by respelling its
header (issue 33: 64 spellings of "Bearer", 64 WAF buckets)."""

from __future__ import annotations

import itertools

import pytest

from chalicelib.auth.authorizer import Authenticator, bearer_token, usage_key
from chalicelib.settings import Settings
from chalicelib.storage.ports import TokenRepository
from tests.support import FixedClock

TOKEN = "mcpq_0123456789ab_AbCdEfGhIjKlMnOpQrStUvWxYz"


def case_spellings(word: str = "Bearer") -> list[str]:
    """Every ASCII case of `word` (2 ** 6 = 64 for "Bearer")."""
    pairs = [(c.lower(), c.upper()) for c in word]
    return ["".join(letters) for letters in itertools.product(*pairs)]


def test_every_case_of_the_scheme_names_the_same_token() -> None:
    spellings = case_spellings()
    assert len(set(spellings)) == 64
    assert {bearer_token(f"{scheme} {TOKEN}") for scheme in spellings} == {TOKEN}


@pytest.mark.parametrize(
    "header",
    [
        f"Bearer  {TOKEN}",  # two spaces: WAF compresses them, the token would escape
        f"Bearer\t{TOKEN}",
        f"Bearer {TOKEN} ",
        f" Bearer {TOKEN}",
        f"Bearer {TOKEN}\n",
        f"Bearer\u00a0{TOKEN}",
        f"Bearer {TOKEN} {TOKEN}",
        f"Bearer{TOKEN}",
        f"Basic {TOKEN}",
        "Bearer ",
        "Bearer",
        "",
        f"Bearer {TOKEN[:-1]}\u00e9",
        f"B\u0435arer {TOKEN}",  # a Cyrillic e
    ],
)
def test_any_other_shape_is_refused_before_a_lookup(header: str) -> None:
    def no_store() -> TokenRepository:
        raise AssertionError("a malformed header must not reach the token store")

    assert bearer_token(header) is None
    result = Authenticator(Settings.from_env({}), no_store, FixedClock()).authenticate(header)
    assert result.identity is None
    assert "Bearer <token>" in result.reason


def test_a_tenants_usage_key_is_long_enough_and_names_the_tenant() -> None:
    assert usage_key("mcp-quota-prod", "acme") == "mcp-quota-mcp-quota-prod-tenant-acme"
    assert usage_key("s", "a") != usage_key("s", None)
    assert len(usage_key("s", "a")) >= 20 and len(usage_key("s", None)) >= 20  # API Gateway's
