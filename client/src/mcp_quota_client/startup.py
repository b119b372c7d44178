"""A server's quota settings at start-up: checked once, and wrong ones said in one line.

The adapters (`QuotaMiddleware`, `protect`) build their client here when none is given.
A `QuotaConfigError` is still raised, so a program can catch it; one nobody catches ends
the process with its one-line message instead of a traceback, because a server author
reads that line in a terminal or an MCP host's log, and a traceback through the
middleware's constructor says nothing the line does not.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import TracebackType
from urllib.parse import urlsplit

from mcp_quota_client.client import QuotaClient
from mcp_quota_client.config import QuotaConfigError


def url_problem(url: str) -> str | None:
    """What is wrong with `MCP_QUOTA_URL`'s value, or None if it is an http(s) URL."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return f"it does not parse ({exc})"
    if parts.scheme not in ("http", "https"):
        return "it must start with http:// or https://"
    if not parts.hostname or any(c.isspace() for c in url):
        return "it names no host"
    return None


def client_from_env(environ: Mapping[str, str] | None = None) -> QuotaClient:
    """`QuotaClient.from_env()` with `MCP_QUOTA_URL` checked to be an http(s) URL.

    Raises:
        QuotaConfigError: a setting is missing or invalid; the message names the variable.
    """
    env = os.environ if environ is None else environ
    try:
        url = env.get("MCP_QUOTA_URL", "").strip()
        problem = url_problem(url) if url else None
        if problem is not None:
            raise QuotaConfigError(
                f"mcp-quota: MCP_QUOTA_URL={url[:80]!r} is not usable: {problem} "
                "(for `make run`: http://127.0.0.1:8000)"
            )
        return QuotaClient.from_env(env)
    except QuotaConfigError:
        say_uncaught_config_errors_in_one_line()
        raise


def say_uncaught_config_errors_in_one_line() -> None:
    """Make an uncaught `QuotaConfigError` print its message only (the status stays 1)."""
    previous = sys.excepthook
    if getattr(previous, "mcp_quota_one_line", False):
        return

    def hook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        if isinstance(error, QuotaConfigError):
            print(error, file=sys.stderr)
            return
        previous(kind, error, trace)

    hook.mcp_quota_one_line = True  # type: ignore[attr-defined]
    sys.excepthook = hook
