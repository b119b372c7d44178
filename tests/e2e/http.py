"""A tiny HTTP helper for end-to-end tests (stdlib only, like a user's curl)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

SERVER_TOKEN = "dev-server-token"
ADMIN_TOKEN = "dev-admin-token"


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: Any


def call(
    url: str, method: str = "GET", body: Any = None, token: str | None = SERVER_TOKEN
) -> Reply:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            raw = response.read()
            return Reply(response.status, dict(response.headers), json.loads(raw or b"null"))
    except urllib.error.HTTPError as error:
        raw = error.read()
        return Reply(error.code, dict(error.headers), json.loads(raw or b"null"))
