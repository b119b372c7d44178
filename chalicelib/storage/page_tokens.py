"""The audit listing's page token, one format for every adapter: where the next page
starts, bound to the tenant and scope it was issued for, and nothing a parser could
choke on.

`a1.<13-digit ms><12-hex event id>.<16-hex binding>`: 45 characters, URL-safe. The
binding is a digest of the tenant and scope, so a token used in another tenant or
session is refused instead of being read as a place in that listing. It is not a
signature and need not be one: the listing always reads the caller's own partition, so
the only thing a hand-made token can choose is where in the caller's own events a page
starts, which `since` chooses too.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

from chalicelib.storage.errors import BadPageToken

_TOKEN = re.compile(r"a1\.([0-9]{13})([0-9a-f]{12})\.([0-9a-f]{16})")
MAX_LENGTH = 45
DOING = "reading the audit trail"


def _binding(tenant: str, scope: str) -> str:
    scoped = f"{len(tenant)}:{tenant}\n{scope}".encode()
    return hashlib.blake2b(scoped, digest_size=8, person=b"mcpq-audit-page").hexdigest()


def encode(tenant: str, scope: str, sort_key: str) -> str:
    """The token for the page after the event with `sort_key` (`<ms>#<event id>`)."""
    return f"a1.{sort_key.replace('#', '', 1)}.{_binding(tenant, scope)}"


def decode(token: str, tenant: str, scope: str) -> str:
    """The sort key after which the next page of this listing starts.

    Raises:
        BadPageToken: the token is not one this listing issued for this tenant and scope.
    """
    match = _TOKEN.fullmatch(token) if len(token) == MAX_LENGTH else None
    if match is None or match.group(3) != _binding(tenant, scope):
        raise BadPageToken(DOING)
    return f"{match.group(1)}#{match.group(2)}"


_KEY_TOKEN = re.compile(r"k1\.([A-Za-z0-9_-]{1,600})\.([0-9a-f]{16})")


def encode_key(tenant: str, scope: str, key: str) -> str:
    """A token for the page after the entry with sort key `key` (any text), URL-safe."""
    raw = base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii").rstrip("=")
    return f"k1.{raw}.{_binding(tenant, scope)}"


def decode_key(token: str, tenant: str, scope: str) -> str:
    """The sort key after which the next page starts.

    Raises:
        BadPageToken: the token is not one this listing issued for this tenant and scope.
    """
    match = _KEY_TOKEN.fullmatch(token)
    if match is None or match.group(2) != _binding(tenant, scope):
        raise BadPageToken(DOING)
    raw = match.group(1)
    try:
        return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise BadPageToken(DOING) from exc
