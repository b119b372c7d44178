"""The secret that signs the email's links, in the packaged stack: a Secrets Manager
secret the stack generates, read once per container (locally: QUOTA_LINK_SECRET)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.storage.faults import translate


def read_link_secret(client: Any, secret_id: str) -> bytes:
    """The secret's value.

    Raises:
        StorageError: Secrets Manager failed or denied the read.
    """
    try:
        response = client.get_secret_value(SecretId=secret_id)
    except (ClientError, BotoCoreError) as exc:
        raise translate(exc, "reading the link-signing secret") from exc
    return str(response["SecretString"]).encode("utf-8")
