"""The fixed development tokens exist only behind QUOTA_DEV_TOKENS=1, which only
scripts/serve_local.py (`make run`) sets: never because of a stage's name."""

from __future__ import annotations

from chalicelib.auth.authorizer import Authenticator
from chalicelib.auth.tokens import SERVER
from chalicelib.settings import Settings
from chalicelib.storage.dynamodb.tokens import TokenStore
from tests.support import ROOT, FixedClock

SERVER_HEADER = "Bearer dev-server-token"


def no_store() -> TokenStore:
    raise AssertionError("a development token must never reach the token store")


def authenticator(env: dict[str, str]) -> Authenticator:
    return Authenticator(Settings.from_env(env), no_store, FixedClock())


def test_the_local_stage_alone_has_no_development_tokens() -> None:
    for env in ({"QUOTA_STAGE": "local"}, {}, {"QUOTA_DEV_TOKENS": "true"}):
        assert authenticator(env).authenticate(SERVER_HEADER).identity is None, env
        assert authenticator(env).authenticate("Bearer dev-admin-token").identity is None, env


def test_the_explicit_switch_enables_them() -> None:
    identity = authenticator({"QUOTA_DEV_TOKENS": "1"}).authenticate(SERVER_HEADER).identity
    assert identity is not None
    assert (identity.tenant, identity.role) == ("demo", SERVER)


def test_only_the_local_runner_sets_the_switch() -> None:
    source = (ROOT / "scripts" / "serve_local.py").read_text()
    assert 'env.setdefault("QUOTA_DEV_TOKENS", "1")' in source
