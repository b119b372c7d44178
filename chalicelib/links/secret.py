"""The keys that sign the email's links, in the packaged stack: a Secrets Manager secret
the stack generates, read per container (locally: QUOTA_LINK_SECRET, one key).

A rotation (`make rotate-link-key`) puts a new value: Secrets Manager labels it
AWSCURRENT and moves the old one to AWSPREVIOUS. New links are signed with the current
key; links sent before the rotation still verify with the previous one.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.storage.faults import error_code, translate

CURRENT = "AWSCURRENT"
PREVIOUS = "AWSPREVIOUS"


def read_link_keys(client: Any, secret_id: str) -> list[bytes]:
    """The current key, then the previous one if the secret has been rotated.

    Raises:
        StorageError: Secrets Manager failed or denied the read.
    """
    keys: list[bytes] = []
    for stage in (CURRENT, PREVIOUS):
        try:
            response = client.get_secret_value(SecretId=secret_id, VersionStage=stage)
        except ClientError as exc:
            if stage == PREVIOUS and error_code(exc) == "ResourceNotFoundException":
                break  # never rotated: one key
            raise translate(exc, "reading the link-signing keys") from exc
        except BotoCoreError as exc:
            raise translate(exc, "reading the link-signing keys") from exc
        keys.append(str(response["SecretString"]).encode("utf-8"))
    return keys
