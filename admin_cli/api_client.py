"""A small stdlib HTTP client for the admin API, used by the CLI.

It never follows redirects (they would carry the admin token to another URL) and turns
every failure into a `CliError` with the exit code scripts rely on.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from email.message import Message
from typing import Any

from admin_cli.errors import CliError, ExitCode, exit_code_for_status

USER_AGENT = "mcp-quota-cli/0.1"
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: urllib would resend the Authorization header to the new URL."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


def check_base_url(url: str) -> str:
    """The service URL without a trailing slash.

    Raises:
        CliError: the URL is not an absolute http(s) URL (usage).
    """
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise CliError(
            f"The service URL must start with http:// or https://, got {url!r}.", ExitCode.USAGE
        )
    return url.rstrip("/")


def is_plain_http_to_remote(url: str) -> bool:
    """Whether a token would travel unencrypted to a host other than this machine."""
    parsed = urllib.parse.urlsplit(url)
    return parsed.scheme == "http" and (parsed.hostname or "") not in _LOOPBACK


_GATEWAY_HINTS = {
    401: (
        "no token reached the service, or it was not understood; "
        "check --token or MCP_QUOTA_ADMIN_TOKEN"
    ),
    403: "the token is unknown, revoked, or not an admin token",
}


def _error_message(status: int, raw: bytes) -> str:
    """The server's `error.message` (with the field it names), or a readable fallback.

    The authorizer answers in API Gateway's shape (`{"message"}` or `{"Message"}`), which
    says little, so those get a hint about what to check.
    """
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        message: str = error["message"]
        field = error.get("field")
        if isinstance(field, str) and field and f"'{field}'" not in message:
            message = f"{message} (field: {field})"
        return message
    if isinstance(body, dict):
        gateway = body.get("message", body.get("Message"))
        if isinstance(gateway, str) and gateway:
            hint = _GATEWAY_HINTS.get(status)
            return f"{gateway} (HTTP {status}){': ' + hint if hint else ''}."
    text = raw.decode("utf-8", "replace").strip()
    snippet = f": {text[:200]}" if text else ""
    return f"The service answered HTTP {status}{snippet}"


class AdminClient:
    """Calls the admin API with an admin bearer token."""

    def __init__(self, base_url: str, token: str, timeout: float = 10.0) -> None:
        self._base = check_base_url(base_url)
        self._token = token
        self._timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirect())

    @property
    def base_url(self) -> str:
        """The service URL requests go to."""
        return self._base

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, str | int | None] | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON body of a 2xx answer.

        Raises:
            CliError: the service refused the request, failed, or could not be reached.
        """
        url = self._base + path
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        if params:
            url = f"{url}?{urllib.parse.urlencode(params)}"
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310
        request.add_header("Authorization", f"Bearer {self._token}")
        request.add_header("Accept", "application/json")
        request.add_header("User-Agent", USER_AGENT)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with self._opener.open(request, timeout=self._timeout) as response:
                status = int(response.status)
                raw = response.read()
        except urllib.error.HTTPError as exc:
            status = exc.code
            raw = exc.read()
            exc.close()
            if 300 <= status < 400:
                target = exc.headers.get("Location", "another URL")
                raise CliError(
                    f"The service at {self._base} redirects to {target}; pass that URL as --url.",
                    ExitCode.UNEXPECTED,
                ) from exc
            raise CliError(_error_message(status, raw), exit_code_for_status(status)) from exc
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise CliError(
                f"Could not reach the quota service at {self._base}: {reason}.",
                ExitCode.UNAVAILABLE,
            ) from exc
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CliError(
                f"The service answered HTTP {status} with a body that is not JSON.",
                ExitCode.UNEXPECTED,
            ) from exc


def quote_segment(value: str) -> str:
    """Percent-encode one path segment, slashes included."""
    return urllib.parse.quote(value, safe="")
