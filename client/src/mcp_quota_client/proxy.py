"""`mcp-quota-proxy`: put the quota in front of any MCP server, in any language, unchanged.

```bash
MCP_QUOTA_URL=http://127.0.0.1:8000 MCP_QUOTA_TOKEN=dev-server-token \
    mcp-quota-proxy --port 8002 --upstream-command "node server.mjs"
MCP_QUOTA_URL=... MCP_QUOTA_TOKEN=... \
    mcp-quota-proxy --stdio --upstream-url http://127.0.0.1:9000/mcp
```

The proxy is a FastMCP proxy server (`FastMCPProxy` over a `ProxyClient`) with
`QuotaMiddleware` installed: tools, resources and prompts pass through, and each
`tools/call` is checked first; a refused call never reaches the upstream.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import anyio
import mcp_types as mt
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fastmcp.server.auth import TokenVerifier
from fastmcp.server.auth.providers.jwt import JWTVerifier
from fastmcp.server.dependencies import get_http_headers
from fastmcp.server.providers.proxy import FastMCPProxy, ProxyClient
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import JSONResponse

from mcp_quota_client.client import QuotaClient
from mcp_quota_client.config import QuotaConfigError
from mcp_quota_client.fastmcp import QuotaMiddleware
from mcp_quota_client.guard import Cost
from mcp_quota_client.passthrough import (
    pass_calls_through,
    pass_lists_through,
    show_upstream_identity,
)
from mcp_quota_client.service_policy import units_of
from mcp_quota_client.session import SessionKeying
from mcp_quota_client.startup import client_from_env, url_problem
from mcp_quota_client.upstream_http import keep_alive_client

PROG = "mcp-quota-proxy"
MCP_PATH = "/mcp"
_QUOTA_ENV_PREFIX = "MCP_QUOTA_"


class UpstreamUnreachableError(Exception):
    """The upstream server could not be reached or did not complete the MCP handshake."""


@dataclass(frozen=True)
class ProxySettings:
    """What the command line asks for; built by `parse_args`."""

    upstream_command: Sequence[str] | None = None
    upstream_url: str | None = None
    name: str | None = None
    stdio: bool = False
    host: str = "127.0.0.1"
    port: int = 8002
    jwt_jwks_url: str | None = None
    jwt_public_key: str | None = None
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    forward_authorization: bool = False
    keying: SessionKeying = SessionKeying.CLIENT
    categories: Mapping[str, str] = field(default_factory=dict)
    costs: Mapping[str, Cost] = field(default_factory=dict)

    @property
    def upstream_label(self) -> str:
        """The upstream as the operator named it, for messages."""
        if self.upstream_url is not None:
            return self.upstream_url
        return shlex.join(self.upstream_command or ())

    @property
    def probes_at_start(self) -> bool:
        """Whether the proxy connects to the upstream before serving. Not when each
        caller's credentials are forwarded and the name is given: such an upstream may
        refuse a connection without them."""
        return not (self.forward_authorization and self.name is not None)

    def verifier(self) -> TokenVerifier | None:
        """FastMCP's JWT verifier when a key or JWKS URL is set, else None (no auth)."""
        if self.jwt_jwks_url is None and self.jwt_public_key is None:
            return None
        return JWTVerifier(
            public_key=self.jwt_public_key,
            jwks_uri=self.jwt_jwks_url,
            issuer=self.jwt_issuer,
            audience=self.jwt_audience,
        )


def upstream_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment a stdio upstream runs with: the proxy's own, less the quota
    settings (the server token is the proxy's, never the upstream's)."""
    return {k: v for k, v in environ.items() if not k.startswith(_QUOTA_ENV_PREFIX)}


class Upstream:
    """Builds the backend client for each proxied request (the `FastMCPProxy` factory).

    The proxy holds one session with its upstream, shared by every caller: a stdio
    upstream is one process for the life of the proxy (FastMCP's kept-alive transport;
    each request a client of its own on it, because only the transport notices a dead
    process and starts it again), an HTTP upstream one MCP session, opened at start and
    again if it closes, over kept-alive connections (`keep_alive_client`), so a call
    pays for no TCP connection of its own. With `--forward-authorization` each request
    instead gets its own HTTP connection carrying its caller's header: a handshake per
    call, the price of passing each caller's credentials on.
    """

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.mode = "auto"
        """The protocol era of new HTTP connections, pinned by `probe`."""
        self._stdio: ProxyClient[Any] | None = None
        self._shared: ProxyClient[Any] | None = None
        self._lock = anyio.Lock()
        if settings.upstream_command is not None:
            command, *args = settings.upstream_command
            transport = StdioTransport(
                command, args, env=upstream_environment(os.environ), keep_alive=True
            )
            self._stdio = ProxyClient(transport, forward_incoming_headers=False, mode="auto")

    async def client(self) -> ProxyClient[Any]:
        """The client one request goes upstream with."""
        if self._stdio is not None:
            return self._stdio.new()
        if self.settings.forward_authorization:
            return self._http_client(self._forwarded_headers())
        async with self._lock:
            shared = self._shared
            if shared is None or not shared.is_connected():
                if shared is not None:
                    await shared.close()  # type: ignore[no-untyped-call]
                shared = self._http_client({})
                # This hold keeps the session open between requests; each request's
                # own `async with` nests inside it. A closed session gets a new client.
                await shared.__aenter__()  # type: ignore[no-untyped-call]
                self._shared = shared
        return shared

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
            async with client:
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
        """Close the shared HTTP session and stop a stdio upstream's process."""
        if self._stdio is not None:
            await self._stdio.transport.close()
        if self._shared is not None:
            await self._shared.close()  # type: ignore[no-untyped-call]
            self._shared = None


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

    pass_lists_through(proxy, upstream.client)
    pass_calls_through(proxy, upstream.client, quota)
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
            await proxy.run_async("stdio", show_banner=False, log_level="warning")
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


def _public_key(value: str) -> str:
    """A PEM given inline, or the path of a file holding one."""
    if value.lstrip().startswith("-----BEGIN"):
        return value
    try:
        return Path(value).read_text()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {value}: {exc.strerror}") from exc


def _category(value: str) -> tuple[str, str]:
    tool, sep, category = value.partition("=")
    if not sep or not tool or not category:
        raise argparse.ArgumentTypeError(f"expected TOOL=CATEGORY, got {value!r}")
    return tool, category


class _Parser(argparse.ArgumentParser):
    """argparse, with a refused command line said in one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        _exit_with(f"{self.prog}: error: {message} (see --help)")


def costs_from_policy(document: Any) -> dict[str, Cost]:
    """The costs a policy file's rules give by `"units_from": "<arg>"`, per tool the rule
    names (`tools`; a `pattern` rule names no tool the proxy could key a cost by): the
    `--policy` override of the service's own rules.

    Raises:
        ValueError: the document has no list of rules.
    """
    rules = document.get("rules", []) if isinstance(document, dict) else None
    if not isinstance(rules, list):
        raise ValueError("the policy has no list of rules")
    costs: dict[str, Cost] = {}
    for rule in rules:
        if not isinstance(rule, dict) or not isinstance(rule.get("units_from"), str):
            continue
        for tool in rule.get("tools", []):
            if isinstance(tool, str):
                costs[tool] = units_of(rule["units_from"])
    return costs


def _policy_costs(value: str) -> dict[str, Cost]:
    try:
        return costs_from_policy(json.loads(Path(value).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read the policy {value!r}: {exc}") from exc


def parser() -> argparse.ArgumentParser:
    """The command line of `mcp-quota-proxy`."""
    p = _Parser(
        prog=PROG,
        description="Serve an MCP server's tools, resources and prompts with every "
        "tools/call checked by the mcp-quota service first. Quota settings come from "
        "the environment: MCP_QUOTA_URL, MCP_QUOTA_TOKEN, MCP_QUOTA_FAIL_OPEN, ...",
    )
    # Required, but checked in parse_args: argparse's own message names no flag clearly.
    upstream = p.add_mutually_exclusive_group()
    upstream.add_argument(
        "--upstream-command",
        metavar="CMD",
        help='run the upstream over stdio, e.g. "node server.mjs" (split like a shell)',
    )
    upstream.add_argument(
        "--upstream-url", metavar="URL", help="a streamable HTTP upstream, e.g. http://host/mcp"
    )
    p.add_argument(
        "--name",
        help="this server's name in quota keys and admin views (default: the upstream's own name)",
    )
    p.add_argument("--stdio", action="store_true", help="serve MCP over stdio, not HTTP")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8002, help="HTTP port (default 8002)")
    p.add_argument("--jwt-jwks-url", metavar="URL", help="verify bearer tokens with this JWKS")
    p.add_argument(
        "--jwt-public-key",
        metavar="PEM_OR_PATH",
        type=_public_key,
        help="verify bearer tokens with this PEM public key (inline or a file)",
    )
    p.add_argument("--jwt-issuer", help="required `iss` of bearer tokens")
    p.add_argument("--jwt-audience", help="required `aud` of bearer tokens")
    p.add_argument(
        "--forward-authorization",
        action="store_true",
        help="pass the caller's Authorization header on to an HTTP upstream",
    )
    p.add_argument(
        "--keying",
        choices=[k.value for k in SessionKeying],
        default=SessionKeying.CLIENT.value,
        help="client: one budget per agent session (default); principal: per token subject",
    )
    p.add_argument(
        "--category",
        metavar="TOOL=CATEGORY",
        type=_category,
        action="append",
        default=[],
        help="count TOOL in CATEGORY (repeatable; a policy rule still wins)",
    )
    p.add_argument(
        "--policy",
        metavar="FILE",
        type=_policy_costs,
        default={},
        help="override: weigh calls by this file's rules' units_from instead of the "
        "service's policy (by default the proxy reads the rules from the service)",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> ProxySettings:
    """Settings from the command line; exits 2 with one line naming the flag when one is
    missing, malformed or contradicts another."""
    p = parser()
    args = p.parse_args(argv)
    if args.upstream_command is None and args.upstream_url is None:
        p.error("--upstream-command or --upstream-url is required")
    command = shlex.split(args.upstream_command) if args.upstream_command is not None else None
    if command is not None and not command:
        p.error("--upstream-command is empty")
    problem = url_problem(args.upstream_url) if args.upstream_url is not None else None
    if problem is not None:
        p.error(f"--upstream-url {args.upstream_url[:80]!r} is not usable: {problem}")
    jwt = args.jwt_jwks_url is not None or args.jwt_public_key is not None
    if args.jwt_jwks_url and args.jwt_public_key:
        p.error("give --jwt-jwks-url or --jwt-public-key, not both")
    if jwt and args.stdio:
        p.error("bearer tokens need HTTP: --jwt-* cannot be used with --stdio")
    if (args.jwt_issuer or args.jwt_audience) and not jwt:
        p.error("--jwt-issuer/--jwt-audience need --jwt-jwks-url or --jwt-public-key")
    if args.forward_authorization and args.upstream_url is None:
        p.error("--forward-authorization needs an HTTP upstream (--upstream-url)")
    return ProxySettings(
        upstream_command=command,
        upstream_url=args.upstream_url,
        name=args.name,
        stdio=args.stdio,
        host=args.host,
        port=args.port,
        jwt_jwks_url=args.jwt_jwks_url,
        jwt_public_key=args.jwt_public_key,
        jwt_issuer=args.jwt_issuer,
        jwt_audience=args.jwt_audience,
        forward_authorization=args.forward_authorization,
        keying=SessionKeying(args.keying),
        categories=dict(args.category),
        costs=args.policy,
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `mcp-quota-proxy` and `python -m mcp_quota_client.proxy`."""
    settings = parse_args(argv)
    try:
        # Checked before the upstream is started or probed: a proxy whose checks can
        # never reach the service must not serve (reads would run uncounted).
        client = client_from_env()
    except QuotaConfigError as exc:
        _exit_with(str(exc))
    try:
        anyio.run(serve, settings, client)
    except UpstreamUnreachableError as exc:
        _exit_with(str(exc))
    except KeyboardInterrupt:
        pass


def _exit_with(line: str) -> NoReturn:
    """One line on stderr and exit 2, as the example servers do: no traceback."""
    print(line, file=sys.stderr)
    raise SystemExit(2)


if __name__ == "__main__":
    main()
