"""The proxy's side of the upstream MCP server: one session, held open for every caller.

`mcp-quota-proxy` keeps one MCP session with its upstream for the life of the proxy: a
stdio upstream is one process (FastMCP's kept-alive `StdioTransport`), an HTTP upstream
one MCP session over kept-alive connections (`keep_alive_client`). A request uses the
held session as it is: no connect, handshake or session task of its own (issue 29 item
5). A call that finds the connection gone drops it (`drop`), and the next request opens
a new one; a stdio upstream that exited is started again. With `--forward-authorization`
each request instead gets its own HTTP connection carrying its caller's header: a
handshake per call, the price of passing each caller's credentials on.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import mcp_types as mt
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fastmcp.server.dependencies import get_http_headers
from fastmcp.server.providers.proxy import ProxyClient
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_quota_client.proxy_cli import PROG, ProxySettings
from mcp_quota_client.upstream_http import keep_alive_client

_QUOTA_ENV_PREFIX = "MCP_QUOTA_"


class UpstreamUnreachableError(Exception):
    """The upstream server could not be reached or did not complete the MCP handshake."""


def upstream_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a stdio upstream runs with: the proxy's own, less the quota
    settings (the server token is the proxy's, never the upstream's)."""
    return {k: v for k, v in environ.items() if not k.startswith(_QUOTA_ENV_PREFIX)}


def connection_lost(exc: BaseException) -> bool:
    """Whether a failed upstream request means its connection is gone (rather than the
    upstream answering with a JSON-RPC error)."""
    return not isinstance(exc, MCPError) or exc.error.code == mt.CONNECTION_CLOSED


class Upstream:
    """The upstream's clients: the one held open, or one per request when each caller's
    `Authorization` is forwarded. Also the `FastMCPProxy` client factory."""

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.mode = "auto"
        """The protocol era of new HTTP connections, pinned by `probe`."""
        self._stdio: StdioTransport | None = None
        self._held: ProxyClient[Any] | None = None
        self._lock = anyio.Lock()
        if settings.upstream_command is not None:
            command, *args = settings.upstream_command
            self._stdio = StdioTransport(
                command, args, env=upstream_environment(os.environ), keep_alive=True
            )

    @property
    def per_request(self) -> bool:
        """Whether each request gets a client (and connection) of its own."""
        return self.settings.forward_authorization

    async def client(self) -> ProxyClient[Any]:
        """The client one request goes upstream with: the held one, connected (opened
        now if there is none or its session ended), or with `--forward-authorization` a
        new one carrying this caller's header, to be entered (`opened`)."""
        if self.per_request:
            return self._http_client(self._forwarded_headers())
        held = self._held
        if held is not None and held.is_connected():
            return held
        async with self._lock:
            held = self._held
            if held is None or not held.is_connected():
                if held is not None:
                    await held.close()  # type: ignore[no-untyped-call]
                held = self._new_client()
                # This hold keeps the session open between requests; a request's own
                # `async with` (FastMCP's proxy components) nests inside it.
                await held.__aenter__()  # type: ignore[no-untyped-call]
                self._held = held
        return held

    def opened(self, client: ProxyClient[Any]) -> AbstractAsyncContextManager[Any]:
        """What keeps `client` connected for one request: nothing for the held client,
        the client's own context for a per-request one."""
        return client if self.per_request else contextlib.nullcontext()

    async def drop(self, client: ProxyClient[Any]) -> None:
        """Forget the held `client` after a request found its connection gone: the next
        request opens a new session (and starts a stdio upstream that exited again)."""
        if client is not self._held:
            return
        self._held = None
        # Closing a session whose transport failed raises that failure again.
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await client.close()  # type: ignore[no-untyped-call]

    def _new_client(self) -> ProxyClient[Any]:
        if self._stdio is not None:
            return ProxyClient(self._stdio, forward_incoming_headers=False, mode="auto")
        return self._http_client({})

    def _http_client(self, headers: dict[str, str]) -> ProxyClient[Any]:
        url = self.settings.upstream_url
        assert url is not None  # parse_args requires one of the two
        # Headers are chosen here, not by FastMCP's forwarding (which copies every
        # eligible inbound header): only Authorization, and only when asked.
        transport = StreamableHttpTransport(
            url, headers=headers, httpx_client_factory=keep_alive_client
        )
        return ProxyClient(transport, forward_incoming_headers=False, mode=self.mode)

    def _forwarded_headers(self) -> dict[str, str]:
        value = get_http_headers(include={"authorization"}).get("authorization")
        return {"Authorization": value} if value else {}

    async def probe(self) -> mt.Implementation:
        """Connect once: learn the upstream's `serverInfo`, and pin the HTTP protocol
        era so that no later connection pays a `server/discover` probe.

        Raises:
            UpstreamUnreachableError: the upstream did not answer the handshake.
        """
        try:
            client = await self.client()
            async with self.opened(client):
                info = client.server_info
                version = client.protocol_version
        except Exception as exc:  # any transport or protocol failure means the same
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UpstreamUnreachableError(
                f"{PROG}: could not connect to the upstream "
                f"{self.settings.upstream_label}: {reason}"
            ) from exc
        if self._stdio is None:
            self.mode = version if version in MODERN_PROTOCOL_VERSIONS else "legacy"
        if info is None or not info.name:
            return mt.Implementation(name="upstream", version="")
        return info

    async def aclose(self) -> None:
        """Close the held session and stop a stdio upstream's process."""
        if self._held is not None:
            await self.drop(self._held)
        if self._stdio is not None:
            await self._stdio.close()  # type: ignore[no-untyped-call]
