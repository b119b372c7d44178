"""`make rotate-link-key STACK=mcp-quota-prod`: put a new link-signing key in the stack's
`LinkSecret`. Secrets Manager makes it AWSCURRENT and keeps the old one as AWSPREVIOUS;
the service signs new links with the current key and still verifies the previous one, so
links already sent keep working for their 24 h. Runs with the operator's credentials
(`secretsmanager:ListSecretVersionIds`, `secretsmanager:PutSecretValue` and, for a leak,
`secretsmanager:UpdateSecretVersionStage` on the secret; `cloudformation:DescribeStacks`
to find it).

Refuses to rotate again within MIN_INTERVAL of the last rotation (FORCE=1 overrides):
a key must stay held until every link it signed has expired (24 h).

`LEAKED=1` is a revocation: after putting the new key it takes every label off every
other version (AWSPREVIOUS included), so the new key is the only one held; containers
re-read the keys within a minute and then neither sign nor verify with a withdrawn key.
Every link sent before is void."""

from __future__ import annotations

import argparse
import secrets
import string
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chalicelib.links.secret import CURRENT  # noqa: E402
from chalicelib.wiring import LINK_KEYS_CACHE_MS  # noqa: E402

MIN_INTERVAL = timedelta(hours=48)
KEY_LENGTH = 64  # as the stack generates it: letters and digits
OUTPUT = "LinkSecretArn"


class RotationRefused(Exception):
    """The current key is too young to be replaced: links it signed would break."""


def new_key() -> str:
    """64 random letters and digits (the stack's GenerateSecretString shape)."""
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(KEY_LENGTH))


def current_since(client: Any, secret_id: str) -> datetime | None:
    """When the current key was put, or None if the secret has no current version."""
    kwargs: dict[str, Any] = {"SecretId": secret_id}
    while True:
        page = client.list_secret_version_ids(**kwargs)
        for version in page.get("Versions", []):
            if CURRENT in version.get("VersionStages", []):
                created: datetime = version["CreatedDate"]
                return created if created.tzinfo else created.replace(tzinfo=UTC)
        if not page.get("NextToken"):
            return None
        kwargs["NextToken"] = page["NextToken"]


def versions(client: Any, secret_id: str) -> list[dict[str, Any]]:
    """Every labelled version of the secret."""
    kwargs: dict[str, Any] = {"SecretId": secret_id}
    found: list[dict[str, Any]] = []
    while True:
        page = client.list_secret_version_ids(**kwargs)
        found += page.get("Versions", [])
        if not page.get("NextToken"):
            return found
        kwargs["NextToken"] = page["NextToken"]


def withdraw_others(client: Any, secret_id: str, keep: str) -> list[str]:
    """Take every label off every version but `keep`; returns the versions withdrawn
    (Secrets Manager deletes unlabelled versions later; no reader asks for one)."""
    withdrawn: list[str] = []
    for version in versions(client, secret_id):
        version_id = str(version["VersionId"])
        if version_id == keep:
            continue
        for stage in version.get("VersionStages", []):
            client.update_secret_version_stage(
                SecretId=secret_id, VersionStage=stage, RemoveFromVersionId=version_id
            )
        withdrawn.append(version_id)
    return withdrawn


def rotate(
    client: Any, secret_id: str, now: datetime, force: bool = False, leaked: bool = False
) -> str:
    """Put a new current key; returns its version id. `leaked`: also withdraw every
    other key (implies `force`).

    Raises:
        RotationRefused: the current key was put less than MIN_INTERVAL ago.
    """
    since = current_since(client, secret_id)
    if not (force or leaked) and since is not None and now - since < MIN_INTERVAL:
        raise RotationRefused(
            f"the current link key was put at {since:%Y-%m-%d %H:%M} UTC, less than "
            f"{MIN_INTERVAL.total_seconds() / 3600:.0f} h ago: rotating now would drop the "
            "key that signed links still in people's inboxes. Wait, or FORCE=1 if that "
            "key is compromised (LEAKED=1 then withdraws it at once)."
        )
    response = client.put_secret_value(SecretId=secret_id, SecretString=new_key())
    version = str(response["VersionId"])
    if leaked:
        withdraw_others(client, secret_id, keep=version)
    return version


def secret_of_stack(cloudformation: Any, stack: str) -> str:
    """The stack's LinkSecret ARN, from its outputs.

    Raises:
        SystemExit: the stack has no such output (packaged before key rotation).
    """
    (described,) = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    for output in described.get("Outputs", []):
        if output["OutputKey"] == OUTPUT:
            return str(output["OutputValue"])
    raise SystemExit(f"stack {stack!r} has no {OUTPUT} output: deploy a current release first")


def main(argv: list[str] | None = None) -> int:
    import boto3  # noqa: PLC0415

    parser = argparse.ArgumentParser(description="Rotate the link-signing key of a stack.")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", help="the stack's name (its LinkSecretArn output)")
    where.add_argument("--secret-id", help="the secret's ARN or name")
    parser.add_argument("--force", action="store_true", help="rotate even within 48 h")
    parser.add_argument(
        "--leaked", action="store_true", help="withdraw every other key: old links stop working"
    )
    args = parser.parse_args(argv)
    secret_id = args.secret_id or secret_of_stack(boto3.client("cloudformation"), args.stack)
    try:
        version = rotate(
            boto3.client("secretsmanager"),
            secret_id,
            datetime.now(UTC),
            args.force,
            leaked=args.leaked,
        )
    except RotationRefused as exc:
        print(f"rotate-link-key: {exc}", file=sys.stderr)
        return 2
    within = f"{LINK_KEYS_CACHE_MS // 1000} s"
    if args.leaked:
        print(
            f"rotated {secret_id}: new key version {version}, every other key withdrawn. "
            f"Within {within} no container signs or accepts a link of a withdrawn key."
        )
    else:
        print(
            f"rotated {secret_id}: new key version {version}. New links use it within "
            f"{within}; links already sent keep working until they expire."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
