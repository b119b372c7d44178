"""The proxy's HTTP client for its upstream: a response closed early is read to its end
when that end is near, so the connection is kept; otherwise it is closed as before."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import anyio
import httpx2
import pytest
from mcp_quota_client.upstream_http import KeepAliveTransport

pytestmark = pytest.mark.anyio


class Body(httpx2.AsyncByteStream):
    """A response body sent in `chunks`; with `then_hang`, the server never ends it."""

    def __init__(self, chunks: list[bytes], *, then_hang: bool = False) -> None:
        self.chunks = chunks
        self.then_hang = then_hang
        self.read: list[bytes] = []
        self.ended = False
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read.append(chunk)
            yield chunk
        if self.then_hang:
            await anyio.sleep_forever()
        self.ended = True

    async def aclose(self) -> None:
        self.closed = True


class Server(httpx2.AsyncBaseTransport):
    def __init__(self, body: Body) -> None:
        self.body = body

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, stream=self.body)


async def read_first_chunk_then_close(transport: KeepAliveTransport, method: str = "POST") -> bytes:
    """What the MCP SDK does with an SSE answer: read up to the event, then close."""
    async with (
        httpx2.AsyncClient(transport=transport) as client,
        client.stream(method, "http://upstream/mcp") as response,
    ):
        async for chunk in response.aiter_raw():
            return chunk
    raise AssertionError("no chunk")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_response_closed_early_is_read_to_its_end_then_closed() -> None:
    body = Body([b"event: message\n", b"data: {}\n\n", b""])

    first = await read_first_chunk_then_close(KeepAliveTransport(Server(body)))

    assert first == b"event: message\n"
    assert body.read == body.chunks
    assert body.ended and body.closed


async def test_a_response_that_does_not_end_is_closed_after_the_drain_time() -> None:
    body = Body([b"event: message\n", b"data: {}\n\n"], then_hang=True)
    transport = KeepAliveTransport(Server(body), drain_seconds=0.2)

    started = time.monotonic()
    with anyio.fail_after(30):  # generous: only a hang fails this
        await read_first_chunk_then_close(transport)

    assert time.monotonic() - started >= 0.2
    assert body.closed and not body.ended


async def test_a_long_remainder_is_not_read_past_the_drain_limit() -> None:
    body = Body([b"head", *[b"x" * 100] * 10])
    transport = KeepAliveTransport(Server(body), drain_bytes=250)

    await read_first_chunk_then_close(transport)

    assert body.read == [b"head", *[b"x" * 100] * 3]
    assert body.closed and not body.ended


async def test_a_listening_get_stream_is_closed_at_once() -> None:
    body = Body([b": ping\n\n"], then_hang=True)
    transport = KeepAliveTransport(Server(body), drain_seconds=600)

    with anyio.fail_after(30):  # draining would wait 600 s
        await read_first_chunk_then_close(transport, "GET")

    assert body.closed and not body.ended
