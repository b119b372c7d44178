from __future__ import annotations

import pytest

from chalicelib.quota.errors import ConfigurationError
from chalicelib.settings import Settings


def test_defaults_are_the_documented_ones() -> None:
    settings = Settings.from_env({})
    assert settings.idle_timeout_seconds == 3600 and settings.last_calls == 10
    assert not settings.is_local and not settings.dev_tokens
    assert Settings.from_env({"QUOTA_STAGE": "local"}).is_local


def test_env_overrides_and_fails_fast_on_nonsense() -> None:
    assert Settings.from_env({"QUOTA_IDLE_TIMEOUT_SECONDS": "5"}).idle_timeout_seconds == 5
    with pytest.raises(ConfigurationError, match="QUOTA_IDLE_TIMEOUT_SECONDS"):
        Settings.from_env({"QUOTA_IDLE_TIMEOUT_SECONDS": "soon"})
    with pytest.raises(ConfigurationError, match=">= 1"):
        Settings.from_env({"QUOTA_LAST_CALLS": "0"})
