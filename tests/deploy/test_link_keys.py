"""Link keys rotate without breaking links already sent: key ids, two keys held during a
rotation, `make rotate-link-key` refusing to drop a key that still signs live links."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from chalicelib.links.secret import read_link_keys
from chalicelib.links.signing import (
    LINK_TTL_MS,
    LinkAction,
    LinkPayload,
    LinkProblem,
    LinkSigner,
    key_id,
)
from chalicelib.wiring import LINK_KEYS_CACHE_MS, Container
from deploy.rotate_link_key import RotationRefused, main, rotate, versions
from tests.support import ROOT, T0, FixedClock, fresh_settings

OLD = b"k" * 64
NEW = b"n" * 64


def payload(expires_ms: int = T0 + LINK_TTL_MS) -> LinkPayload:
    return LinkPayload("acme", "s1", LinkAction.SUSPEND, "write", 0, "abcd", expires_ms)


@pytest.fixture
def secrets_client() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("secretsmanager")
        client.create_secret(Name="link-secret", SecretString=OLD.decode())
        yield client


def test_a_token_names_its_key_and_any_held_key_verifies_it() -> None:
    old = LinkSigner([OLD])
    token = old.sign(payload())
    assert token.startswith(f"v2-{key_id(OLD)}.")
    assert key_id(OLD) != key_id(NEW) and len(key_id(OLD)) == 8
    rotated = LinkSigner([NEW, OLD])  # during a rotation: current, then previous
    assert rotated.current_key_id == key_id(NEW)
    assert rotated.verify(token, T0) == payload()
    assert rotated.sign(payload()).startswith(f"v2-{key_id(NEW)}.")
    assert LinkSigner([NEW]).verify(token, T0) is LinkProblem.TAMPERED  # key dropped


def test_a_link_from_before_key_ids_is_retired() -> None:
    """Defect class: a credential that outlives its key's revocation (a v1 link verified
    against every key held, whichever signed it)."""
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415
    import hmac  # noqa: PLC0415
    import json  # noqa: PLC0415

    compact = json.dumps(payload().to_compact(), separators=(",", ":"), sort_keys=True)
    encoded = base64.urlsafe_b64encode(compact.encode()).decode().rstrip("=")
    body = f"v1.{encoded}"
    mac = base64.urlsafe_b64encode(hmac.new(OLD, body.encode(), hashlib.sha256).digest())
    legacy = f"{body}.{mac.decode().rstrip('=')}"
    assert LinkSigner([NEW, OLD]).verify(legacy, T0) is LinkProblem.RETIRED


def test_an_unseen_key_id_rereads_the_keys_at_most_once_a_minute() -> None:
    reads: list[int] = []

    def reload() -> list[bytes]:
        reads.append(1)
        return [NEW, OLD]

    warm = LinkSigner([OLD], reload=reload)  # read before another container rotated
    fresh = LinkSigner([NEW, OLD]).sign(payload())
    assert warm.verify(fresh, T0) == payload()
    assert len(reads) == 1
    forged = fresh.replace(key_id(NEW), "0" * 8)
    assert warm.verify(forged, T0 + 1000) is LinkProblem.TAMPERED
    assert len(reads) == 1  # no reload storm from forged key ids


def test_rotation_keeps_the_previous_key_and_links_sent_before_it(secrets_client: Any) -> None:
    sent = LinkSigner(read_link_keys(secrets_client, "link-secret")).sign(payload())
    later = datetime.now(UTC) + timedelta(hours=49)

    rotate(secrets_client, "link-secret", later)

    keys = read_link_keys(secrets_client, "link-secret")
    assert len(keys) == 2 and keys[1] == OLD and keys[0] != OLD and len(keys[0]) == 64
    signer = LinkSigner(keys)
    # The link sent 23 h 59 min before it expires still works after the rotation.
    assert signer.verify(sent, T0 + LINK_TTL_MS - 60_000) == payload()
    assert signer.current_key_id == key_id(keys[0])


def test_a_second_rotation_within_48_hours_is_refused(secrets_client: Any) -> None:
    now = datetime.now(UTC)
    with pytest.raises(RotationRefused, match="less than 48 h ago"):
        rotate(secrets_client, "link-secret", now + timedelta(hours=47))
    rotate(secrets_client, "link-secret", now, force=True)  # a compromised key
    assert read_link_keys(secrets_client, "link-secret")[1] == OLD


def test_the_make_target_refuses_with_status_2(
    secrets_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--secret-id", "link-secret"]) == 2
    assert "FORCE=1" in capsys.readouterr().err
    assert main(["--secret-id", "link-secret", "--force"]) == 0
    assert "new key version" in capsys.readouterr().out


def test_a_leaked_rotation_revokes_the_old_key_in_a_running_instance(
    secrets_client: Any,
) -> None:
    """Defect class: a revocation that revokes nothing (after a forced rotation a warm
    container still signed and accepted links of the leaked key, for up to an hour)."""
    clock = FixedClock()
    settings = replace(fresh_settings("leak"), link_secret="", link_secret_arn="link-secret")
    running = Container(settings=settings, clock=clock)
    signer = running.link_signer
    assert signer is not None and signer.current_key_id == key_id(OLD)
    leaked_link = signer.sign(payload())

    rotate(secrets_client, "link-secret", datetime.now(UTC), leaked=True)

    (only,) = read_link_keys(secrets_client, "link-secret")  # no AWSPREVIOUS left
    assert only != OLD
    labels = [v.get("VersionStages", []) for v in versions(secrets_client, "link-secret")]
    assert [stages for stages in labels if stages] == [["AWSCURRENT"]]
    clock.advance(LINK_KEYS_CACHE_MS / 1000 - 1)
    assert running.link_signer is signer  # still within the reload interval
    clock.advance(1)
    reloaded = running.link_signer
    assert reloaded is not None
    assert reloaded.current_key_id == key_id(only)
    assert reloaded.sign(payload()).startswith(f"v2-{key_id(only)}.")
    assert reloaded.verify(leaked_link, clock()) is LinkProblem.TAMPERED
    assert LINK_KEYS_CACHE_MS <= 60_000


def test_a_link_of_the_new_key_drops_the_leaked_one_at_once(secrets_client: Any) -> None:
    """Defect class: a revocation that waits on a cache (the unknown key id re-read)."""
    clock = FixedClock()
    settings = replace(fresh_settings("leak"), link_secret="", link_secret_arn="link-secret")
    running = Container(settings=settings, clock=clock)
    signer = running.link_signer
    assert signer is not None
    leaked_link = signer.sign(payload())
    rotate(secrets_client, "link-secret", datetime.now(UTC), leaked=True)
    fresh = LinkSigner(read_link_keys(secrets_client, "link-secret")).sign(payload())
    assert signer.verify(fresh, clock()) == payload()  # re-read on the unknown key id
    assert signer.verify(leaked_link, clock()) is LinkProblem.TAMPERED
    assert signer.current_key_id != key_id(OLD)


def test_make_rotate_link_key_leaked_withdraws_within_48_hours(
    secrets_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--secret-id", "link-secret", "--leaked"]) == 0
    assert "every other key withdrawn" in capsys.readouterr().out
    assert len(read_link_keys(secrets_client, "link-secret")) == 1
    make = (ROOT / "mk" / "package.mk").read_text()
    assert "$(if $(LEAKED),--leaked)" in make
