"""`mcp-quota-proxy`: put the quota in front of any MCP server, in any language, unchanged.

```bash
MCP_QUOTA_URL=http://127.0.0.1:8000 MCP_QUOTA_TOKEN=dev-server-token \
    mcp-quota-proxy --port 8002 --upstream-command "node server.mjs"
MCP_QUOTA_URL=... MCP_QUOTA_TOKEN=... \
    mcp-quota-proxy --stdio --upstream-url http://127.0.0.1:9000/mcp
```

The proxy is a FastMCP proxy server (`FastMCPProxy` over a `ProxyClient`) with
`QuotaMiddleware` installed: tools, resources and prompts pass through, and each
`tools/call` is checked first; a refused call never reaches the upstream. Its command
line is `proxy_cli`, its upstream session `upstream`, and what it answers in the SDK's
low-level server (lists, calls) `passthrough`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import anyio
import mcp_types as mt
from fastmcp.server.providers.proxy import FastMCPProxy
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp_quota_client.client import QuotaClient
from mcp_quota_client.config import QuotaConfigError
from mcp_quota_client.fastmcp import QuotaMiddleware
from mcp_quota_client.passthrough import (
    pass_calls_through,
    pass_lists_through,
    show_upstream_identity,
)
from mcp_quota_client.proxy_cli import (
    PROG,
    ProxySettings,
    costs_from_policy,
    exit_with,
    parse_args,
    parser,
)
from mcp_quota_client.startup import client_from_env
from mcp_quota_client.stdio_serve import run_stdio
from mcp_quota_client.upstream import Upstream, UpstreamUnreachableError, upstream_environment

__all__ = [
    "MCP_PATH",
    "PROG",
    "ProxySettings",
    "Upstream",
    "UpstreamUnreachableError",
    "build_proxy",
    "costs_from_policy",
    "main",
    "parse_args",
    "parser",
    "serve",
    "start_line",
    "upstream_environment",
]

MCP_PATH = "/mcp"


def build_proxy(
    settings: ProxySettings,
    upstream: Upstream,
    name: str,
    client: QuotaClient | None = None,
    info: mt.Implementation | None = None,
) -> FastMCPProxy:
    """The proxy server: `upstream`'s tools, resources and prompts behind the quota,
    listed as the upstream lists them, under the upstream's `serverInfo` (`info`; the
    quota's `name` when the upstream was not probed).

    Raises:
        QuotaConfigError: no client given and `MCP_QUOTA_URL`/`MCP_QUOTA_TOKEN` unset.
    """
    quota = QuotaMiddleware(
        client,
        keying=settings.keying,
        categories=settings.categories,
        server_name=name,
        costs=settings.costs,
    )
    proxy = FastMCPProxy(
        client_factory=upstream.client,
        name=name,
        auth=settings.verifier(),
        # First in the chain, before the proxy's own middleware and the proxied tool:
        # a refused call is answered here and never sent upstream.
        middleware=[quota],
    )

    pass_lists_through(proxy, upstream)
    pass_calls_through(proxy, upstream, quota)
    show_upstream_identity(proxy, info or mt.Implementation(name=name, version=""))

    @proxy.custom_route("/health", methods=["GET"])
    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    return proxy


async def serve(settings: ProxySettings, client: QuotaClient | None = None) -> None:
    """Probe the upstream, then serve until stopped.

    Everything runs on one event loop, so the stdio upstream started by the probe is
    the one that serves every later call.

    Raises:
        UpstreamUnreachableError: the upstream did not answer at start.
        QuotaConfigError: no client given and the quota settings are missing or invalid.
    """
    upstream = Upstream(settings)
    if client is None:
        client = client_from_env()
    try:
        probed = await upstream.probe() if settings.probes_at_start else None
        name = settings.name or (probed.name if probed is not None else "upstream")
        proxy = build_proxy(settings, upstream, name, client, probed)
        print(start_line(settings, client.config.base_url), file=sys.stderr, flush=True)
        if settings.stdio:
            await run_stdio(proxy)
        else:
            await proxy.run_async(
                "http",
                show_banner=False,
                host=settings.host,
                port=settings.port,
                path=MCP_PATH,
                log_level="warning",
            )
    finally:
        await upstream.aclose()
        # Gives back unspent leased reads (best effort; a killed proxy leaves them
        # counted, the safe side).
        await client.aclose()


def start_line(settings: ProxySettings, service_url: str) -> str:
    """The one line the proxy prints when it starts: where it listens, which upstream,
    which quota service (on stderr: over `--stdio`, stdout is the MCP stream)."""
    where = "stdio" if settings.stdio else f"http://{settings.host}:{settings.port}{MCP_PATH}"
    return (
        f"{PROG}: listening on {where}, upstream {settings.upstream_label}, "
        f"quota service {service_url}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `mcp-quota-proxy` and `python -m mcp_quota_client.proxy`."""
    settings = parse_args(argv)
    try:
        # Checked before the upstream is started or probed: a proxy whose checks can
        # never reach the service must not serve (reads would run uncounted).
        client = client_from_env()
    except QuotaConfigError as exc:
        exit_with(str(exc))
    try:
        anyio.run(serve, settings, client)
    except UpstreamUnreachableError as exc:
        exit_with(str(exc))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
