"""The HTTP client the proxy reaches a streamable HTTP upstream with: one that keeps its
connections alive between calls.

The MCP SDK's client reads an SSE answer up to the event that carries the response and
then closes it. The body's last bytes (often already received) are left unread, so
httpx drops the connection and the next call opens another: a TCP connect and close on
every proxied call. Here a response closed early is read to its end first, when that
end is near (at most `DRAIN_BYTES`, within `DRAIN_SECONDS`), so its connection goes back
to the pool. A stream that stays open longer is closed as before, and a GET stream of
unknown length (the session's listening stream, open until the session ends) is closed
at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2

DRAIN_BYTES = 64 * 1024
"""Unread body the client still reads to keep a connection; beyond it, it closes."""
DRAIN_SECONDS = 0.5
"""How long the client waits for a closed response's remaining body."""
DEFAULT_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
"""The MCP SDK's own default: a server may hold a response stream open."""


class _DrainedOnClose(httpx2.AsyncByteStream):
    """A response body that, closed before its end, reads the rest when it is near."""

    def __init__(self, inner: httpx2.AsyncByteStream, max_bytes: int, seconds: float) -> None:
        self._inner = inner
        self._max_bytes = max_bytes
        self._seconds = seconds
        self._chunks: AsyncIterator[bytes] | None = None
        self._ended = False

    def _iterator(self) -> AsyncIterator[bytes]:
        # One iterator for the reader and the drain: the body is read once, in order.
        if self._chunks is None:
            self._chunks = aiter(self._inner)
        return self._chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._iterator():
            yield chunk
        self._ended = True

    async def aclose(self) -> None:
        if not self._ended:
            await self._drain()
        await self._inner.aclose()

    async def _drain(self) -> None:
        read = 0
        with anyio.move_on_after(self._seconds):
            try:
                async for chunk in self._iterator():
                    read += len(chunk)
                    if read > self._max_bytes:
                        return
            except httpx2.HTTPError:
                return  # the connection is closed either way
            self._ended = True


class KeepAliveTransport(httpx2.AsyncBaseTransport):
    """httpx's own transport, with every response body drained on an early close."""

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport | None = None,
        *,
        drain_bytes: int = DRAIN_BYTES,
        drain_seconds: float = DRAIN_SECONDS,
    ) -> None:
        self._inner = inner if inner is not None else httpx2.AsyncHTTPTransport()
        self._drain_bytes = drain_bytes
        self._drain_seconds = drain_seconds

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        stream = response.stream
        # A POST's answer ends after its response; a GET stream only when it says so.
        finite = request.method != "GET" or "content-length" in response.headers
        if finite and isinstance(stream, httpx2.AsyncByteStream):
            response.stream = _DrainedOnClose(stream, self._drain_bytes, self._drain_seconds)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def keep_alive_client(
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
    **kwargs: Any,
) -> httpx2.AsyncClient:
    """An `httpx_client_factory` for `StreamableHttpTransport` (the SDK's defaults, and
    `KeepAliveTransport`)."""
    return httpx2.AsyncClient(
        headers=headers,
        timeout=timeout if timeout is not None else DEFAULT_TIMEOUT,
        auth=auth,
        transport=KeepAliveTransport(),
        **kwargs,
    )
