"""A TCP proxy that adds a fixed delay to every HTTP request it forwards, so the local
stand-ins for DynamoDB cost a network round trip per request, as DynamoDB does.

    .venv/bin/python -m bench.latency_proxy --upstream 127.0.0.1:8000 --delay-ms 5

Prints its own port on the first line of stdout, then forwards until stopped. The delay is
applied once to each client->server chunk in which an HTTP/1.1 request begins (found by
Content-Length framing, so keep-alive connections carrying many requests work); nothing
else in the data path waits. Responses pass straight through.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_HEAD = 64 * 1024
CHUNK = 64 * 1024


class RequestFramer:
    """Finds where requests begin in one connection's client->server byte stream.

    Requests are framed by Content-Length (botocore always sends it); chunked request
    bodies are not supported.
    """

    def __init__(self) -> None:
        self._head = bytearray()
        self._in_head = False
        self._body_left = 0

    def starts(self, data: bytes) -> int:
        """How many requests begin in this chunk.

        Raises:
            ValueError: a request head is oversized or uses chunked transfer coding.
        """
        begun = 0
        pos = 0
        while pos < len(data):
            if self._body_left:
                taken = min(self._body_left, len(data) - pos)
                self._body_left -= taken
                pos += taken
                continue
            if not self._in_head:
                self._in_head = True
                begun += 1
            self._head += data[pos:]
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > MAX_HEAD:
                    raise ValueError("request head over 64 KiB")
                return begun
            after_head = len(self._head) - (end + 4)
            self._body_left = _content_length(bytes(self._head[:end]))
            self._head.clear()
            self._in_head = False
            pos = len(data) - after_head
        return begun


def _content_length(head: bytes) -> int:
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            raise ValueError("chunked request bodies are not supported")
    return length


async def _requests(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
) -> None:
    """Client -> server: hold back each chunk that begins a request by `delay` seconds."""
    framer = RequestFramer()
    while data := await reader.read(CHUNK):
        if delay and framer.starts(data):
            await asyncio.sleep(delay)
        writer.write(data)
        await writer.drain()


async def _responses(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Server -> client: straight through."""
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()


async def serve(upstream: tuple[str, int], delay_ms: float, port: int = 0) -> None:
    """Listen on loopback `port` (0: any free one), print it, and forward until SIGTERM."""
    delay = delay_ms / 1000
    live: set[asyncio.Task[None]] = set()  # the loop holds tasks weakly

    async def connection(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            s_reader, s_writer = await asyncio.open_connection(*upstream)
        except OSError:
            c_writer.close()
            return
        pumps = {
            asyncio.create_task(_requests(c_reader, s_writer, delay)),
            asyncio.create_task(_responses(s_reader, c_writer)),
        }
        live.update(pumps)
        try:
            # Either side closing ends the exchange (HTTP needs no half-open connection).
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for pump in done:
                pump.exception()  # a reset or an unframeable request: this connection only
        finally:
            for pump in pumps:
                pump.cancel()
                live.discard(pump)
            for writer in (c_writer, s_writer):
                writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await stop.wait()


@contextlib.contextmanager
def child_server(module: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run `python -m module args` (a server that prints its loopback port first) in its
    own process, away from the benchmark's GIL; yields its endpoint URL.

    Raises:
        RuntimeError: it exited without printing a port.
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        if not port:
            raise RuntimeError(f"{module} did not start")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def latency_proxy(endpoint: str, delay_ms: float) -> contextlib.AbstractContextManager[str]:
    """The proxy in front of `endpoint` (http://host:port), in a child process; yields the
    proxied endpoint URL."""
    upstream = endpoint.removeprefix("http://")
    return child_server("bench.latency_proxy", "--upstream", upstream, "--delay-ms", str(delay_ms))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="host:port to forward to")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="added to each request")
    parser.add_argument("--port", type=int, default=0, help="loopback port (0: any free)")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve((host, int(port)), args.delay_ms, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
