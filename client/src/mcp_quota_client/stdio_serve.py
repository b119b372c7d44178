"""`mcp-quota-proxy --stdio`: the MCP SDK's stdio server, its stdin and stdout on the loop.

The SDK's `stdio_server` reads each line of stdin and writes (and flushes) each line of
stdout in a worker thread: three thread hand-offs per proxied call, about a third of
the proxy's own latency over stdio (issue 29 item 5). When stdin and stdout are pipes,
sockets or terminals, the proxy gives it the same lines read and written by the event
loop instead; the SDK still parses and frames every message. Anything else (a regular
file) keeps the SDK's own streams. As with the SDK's, fd 0 reads end-of-file and fd 1
goes to stderr while serving, so nothing stray reaches the wire.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastmcp.server.context import reset_transport, set_transport
from fastmcp.server.providers.proxy import FastMCPProxy
from fastmcp.utilities.logging import temporary_log_level
from mcp.server.stdio import stdio_server

LINE_LIMIT = 256 * 1024 * 1024
"""The longest message line read from stdin (the SDK's own reader has none)."""


async def run_stdio(proxy: FastMCPProxy) -> None:
    """Serve `proxy` over stdio until stdin ends: `proxy.run_async("stdio")`, with the
    loop's stdin and stdout."""
    token = set_transport("stdio")
    try:
        with temporary_log_level("warning"):
            async with (
                proxy._lifespan_manager(),
                _loop_stdio() as (stdin, stdout),
                stdio_server(stdin, stdout) as (read_stream, write_stream),
            ):
                server = proxy._mcp_server
                options = server.create_initialization_options()
                await server.run(read_stream, write_stream, options)
    finally:
        reset_transport(token)


class _Lines:
    """stdin as the SDK reads it: an async iterator of text lines."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _Writes:
    """stdout as the SDK writes it: `write` a line, then `flush`."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _streamable(fd: int) -> bool:
    """Whether the event loop can read or write `fd` (a pipe, socket or terminal)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@asynccontextmanager
async def _loop_stdio() -> AsyncIterator[tuple[Any, Any]]:
    # Any: `stdio_server` types its arguments as anyio's `AsyncFile`, of which it uses
    # only iteration, `write` and `flush`.
    """stdin and stdout for `stdio_server` on the event loop, or (None, None): its own."""
    if not (_streamable(0) and _streamable(1)):
        yield None, None
        return
    # The transports own (and close, at end of input) duplicates of their own; these
    # keep the wire to put back on fds 0 and 1 afterwards.
    saved = os.dup(0), os.dup(1)
    blocking = os.get_blocking(0), os.get_blocking(1)
    read_file = os.fdopen(os.dup(0), "rb", buffering=0)
    write_file = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    reading, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), read_file
    )
    # FlowControlMixin: the protocol asyncio's own stdout streams use (it makes `drain`
    # wait while the pipe is full).
    writing, protocol = await loop.connect_write_pipe(
        lambda: asyncio.streams.FlowControlMixin(loop=loop), write_file
    )
    writer = asyncio.StreamWriter(writing, protocol, None, loop)
    try:
        yield _Lines(reader), _Writes(writer)
    finally:
        reading.close()
        writing.close()
        for fd, wire, was_blocking in zip((0, 1), saved, blocking, strict=True):
            os.dup2(wire, fd)
            os.close(wire)
            # Non-blocking is a flag of the shared file (a terminal is the shell's too).
            os.set_blocking(fd, was_blocking)
