"""The command line of `mcp-quota-proxy`: its flags, parsed and checked into `ProxySettings`."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from fastmcp.server.auth import TokenVerifier
from fastmcp.server.auth.providers.jwt import JWTVerifier

from mcp_quota_client.guard import Cost
from mcp_quota_client.service_policy import units_of
from mcp_quota_client.session import SessionKeying
from mcp_quota_client.startup import url_problem

PROG = "mcp-quota-proxy"


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
        exit_with(f"{self.prog}: error: {message} (see --help)")


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


def exit_with(line: str) -> NoReturn:
    """One line on stderr and exit 2, as the example servers do: no traceback."""
    print(line, file=sys.stderr)
    raise SystemExit(2)
