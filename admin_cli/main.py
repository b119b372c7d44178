"""The `mcp-quota` admin command line: tokens (DynamoDB, with the operator's AWS
credentials) and sessions, grants and the audit trail (the service's admin HTTP API).

Exit codes: 0 ok, 1 unexpected, 2 usage or bad input (HTTP 400/413), 3 not found (404),
4 authentication or role (401/403, or no token), 5 conflict (409), 6 service unavailable
or unreachable (5xx, 429, connection errors). See docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import Any

from admin_cli import approvals, commands, render
from admin_cli.api_client import AdminClient, is_plain_http_to_remote
from admin_cli.errors import CliError, ExitCode
from admin_cli.render import Output
from chalicelib.auth.tokens import ROLES
from chalicelib.clock import system_clock
from chalicelib.quota.errors import ConfigurationError
from chalicelib.settings import Settings

PROG = "mcp-quota"
DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV = "MCP_QUOTA_URL"
TOKEN_ENV = "MCP_QUOTA_ADMIN_TOKEN"
SERVER_TOKEN_ENV = "MCP_QUOTA_TOKEN"
"""The MCP side's server token: never taken for the admin token."""

Handler = Callable[[argparse.Namespace, Mapping[str, str]], Output]


def _version() -> str:
    try:
        return metadata.version("mcp-quota")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


# --- HTTP commands -------------------------------------------------------------------------


def _client(args: argparse.Namespace, env: Mapping[str, str]) -> AdminClient:
    """The admin API client from --url/--token or MCP_QUOTA_URL/MCP_QUOTA_ADMIN_TOKEN.

    Raises:
        CliError: no token (auth) or a malformed URL (usage).
    """
    url = args.url or env.get(URL_ENV) or DEFAULT_URL
    token = args.token or env.get(TOKEN_ENV)
    if not token:
        hint = (
            f" {SERVER_TOKEN_ENV} is the MCP server's token, not an admin token."
            if env.get(SERVER_TOKEN_ENV)
            else ""
        )
        raise CliError(
            f"No admin token: pass --token or set {TOKEN_ENV} (create one with "
            f"`{PROG} token create --tenant T --role admin`).{hint}",
            ExitCode.AUTH,
        )
    client = AdminClient(url, token, timeout=args.timeout)
    if is_plain_http_to_remote(client.base_url):
        print(
            f"{PROG}: warning: sending the admin token unencrypted to "
            f"{render.escape(client.base_url)}",
            file=sys.stderr,
        )
    return client


def _session_show(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.session_show(_client(args, env), args.session_id)


def _session_raise(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.session_raise(
        _client(args, env), args.session_id, args.category, args.reason, args.limit, args.add
    )


def _session_action(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.session_action(_client(args, env), args.session_id, args.action, args.reason)


def _session_lower(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.session_lower(_client(args, env), args.session_id, args.category, args.reason)


def _session_list(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.session_list(_client(args, env), args.state, args.since)


def _principal_show(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.principal_show(_client(args, env), args.principal)


def _principal_raise(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.principal_raise(
        _client(args, env), args.principal, args.category, args.reason, args.limit, args.add
    )


def _principal_action(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.principal_action(_client(args, env), args.principal, args.action, args.reason)


def _tenant_show(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.tenant_show(_client(args, env))


def _grant_add(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.grant_add(
        _client(args, env),
        args.principal,
        args.category,
        args.limit,
        args.starts_at,
        args.ends_at,
        args.reason,
    )


def _grant_list(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.grant_list(_client(args, env))


def _grant_rm(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.grant_rm(_client(args, env), args.grant_id)


def _shadow(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.shadow(_client(args, env), args.since)


def _audit(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    return commands.audit(
        _client(args, env),
        args.session,
        args.since,
        args.limit,
        args.next,
        args.all_pages,
        type_=args.type,
        principal=args.principal,
        server=args.server,
        until=args.until,
    )


# --- token commands (DynamoDB) -------------------------------------------------------------


def _token(args: argparse.Namespace, env: Mapping[str, str]) -> Output:
    principals = tuple(getattr(args, "principal", None) or ())
    if args.api:
        client = _client(args, env)
        if args.token_command == "create":
            if getattr(args, "expires_in_days", None) is not None:
                raise CliError(
                    "--expires-in-days writes the tokens table: use it without --api.",
                    ExitCode.USAGE,
                )
            return commands.token_create_api(client, args.role, args.name, principals)
        if args.token_command == "revoke":
            return commands.token_revoke_api(client, args.token_id)
        return commands.token_list_api(client)
    # Imported here so that session/grant/audit commands never pay for boto3.
    from admin_cli import tokens  # noqa: PLC0415

    try:
        settings = Settings.from_env(env)
    except ConfigurationError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from exc
    region = tokens.region_from(args.region, env)
    store = tokens.store_for(args.table or settings.tokens_table, region)
    trail = tokens.TokenAudit(
        tokens.audit_store_for(settings.audit_table, region, settings.audit_ttl_days)
    )
    if args.token_command == "create":
        if not args.tenant:
            raise CliError("token create needs --tenant (or --api).", ExitCode.USAGE)
        return tokens.command_create(
            store,
            args.tenant,
            args.role,
            args.name,
            system_clock(),
            trail,
            principals,
            args.expires_in_days,
        )
    if args.token_command == "revoke":
        return tokens.command_revoke(store, args.token_id, system_clock(), trail)
    return tokens.command_list(store, args.tenant)


# --- parser --------------------------------------------------------------------------------


def _output_options(parser: argparse.ArgumentParser, leaf: bool) -> None:
    # Leaves repeat the root's options with SUPPRESS defaults, so that an option works
    # before or after the subcommand without the leaf's default hiding the root's value.
    default: Any = argparse.SUPPRESS if leaf else False
    parser.add_argument(
        "--json", action="store_true", default=default, help="print the JSON result for scripts"
    )


def _http_options(parser: argparse.ArgumentParser, leaf: bool) -> None:
    _output_options(parser, leaf)
    suppress = argparse.SUPPRESS if leaf else None
    parser.add_argument(
        "--url", default=suppress, help=f"service URL (env {URL_ENV}, default {DEFAULT_URL})"
    )
    parser.add_argument("--token", default=suppress, help=f"admin bearer token (env {TOKEN_ENV})")
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=argparse.SUPPRESS if leaf else 10.0,
        help="seconds to wait for the service (default 10)",
    )


def _leaf(
    group: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    handler: Handler,
    http: bool = True,
) -> argparse.ArgumentParser:
    parser = group.add_parser(name, help=help_text, description=help_text)
    if http:
        _http_options(parser, leaf=True)
    else:
        _output_options(parser, leaf=True)
        parser.add_argument(
            "--table", help="tokens table (env QUOTA_TOKENS_TABLE, default mcp-quota-tokens)"
        )
        parser.add_argument(
            "--region", help="AWS region (env AWS_REGION, default: your AWS configuration)"
        )
    parser.set_defaults(handler=handler)
    return parser


def _add_token_commands(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = root.add_parser(
        "token",
        help="create, list and revoke bearer tokens (DynamoDB, your AWS credentials)",
        description="Tokens are written straight to the tokens table with your own AWS "
        "credentials; AWS_ENDPOINT_URL selects a DynamoDB-compatible endpoint.",
    )
    commands = token.add_subparsers(dest="token_command", required=True, metavar="COMMAND")
    create = _leaf(commands, "create", "create a token and print it once", _token, http=False)
    create.add_argument("--tenant", help="tenant the token belongs to (not with --api)")
    create.add_argument(
        "--role",
        required=True,
        choices=ROLES,
        help="server (checks), viewer, operator or admin (the admin API)",
    )
    create.add_argument("--name", default="", help="what the token is for, e.g. the host")
    create.add_argument(
        "--principal",
        action="append",
        metavar="PRINCIPAL",
        help="a principal a server token may claim (a name or * pattern); repeatable",
    )
    create.add_argument(
        "--expires-in-days",
        type=int,
        metavar="DAYS",
        help="the token stops working this many days from now (default: never)",
    )
    revoke = _leaf(commands, "revoke", "revoke a token by its id", _token, http=False)
    revoke.add_argument("token_id", metavar="TOKEN_ID", help="12 hex characters after mcpq_")
    listing = _leaf(commands, "list", "list tokens (never their secrets)", _token, http=False)
    listing.add_argument("--tenant", help="only this tenant's tokens")
    for parser in (create, revoke, listing):
        parser.add_argument(
            "--api",
            action="store_true",
            help=f"use the admin API (--url/--token or {URL_ENV}/{TOKEN_ENV}) instead of "
            "DynamoDB: the token's tenant is the admin token's",
        )


def _add_levers(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    subject: tuple[str, str],
    handlers: tuple[Handler, Handler, Handler],
    helps: dict[str, str],
) -> None:
    """show, raise, suspend, resume and reset of one kind of subject (a session or a
    principal): the same levers at every scope."""
    dest, metavar = subject
    show_handler, raise_handler, action_handler = handlers
    show = _leaf(commands, "show", helps["show"], show_handler)
    show.add_argument(dest, metavar=metavar)
    raise_ = _leaf(commands, "raise", helps["raise"], raise_handler)
    raise_.add_argument(dest, metavar=metavar)
    raise_.add_argument("--category", required=True, help="category to raise, e.g. write")
    amount = raise_.add_mutually_exclusive_group(required=True)
    amount.add_argument("--limit", type=_positive_int, help="the new limit")
    amount.add_argument("--add", type=_positive_int, help="calls to add to the current limit")
    raise_.add_argument("--reason", required=True, help="why (recorded in the audit trail)")
    for action in ("suspend", "resume", "reset"):
        parser = _leaf(commands, action, helps[action], action_handler)
        parser.add_argument(dest, metavar=metavar)
        parser.add_argument("--reason", required=True, help="why (recorded in the audit trail)")
        parser.set_defaults(action=action)


def _add_session_commands(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    session = root.add_parser("session", help="inspect a session and act on it")
    commands = session.add_subparsers(dest="session_command", required=True, metavar="COMMAND")
    helps = {
        "show": "counters, limits, state and last calls",
        "raise": "raise one category's limit for a session",
        "suspend": "refuse every check of the session (kill switch)",
        "resume": "lift a suspension",
        "reset": "zero the session's counters",
    }
    handlers = (_session_show, _session_raise, _session_action)
    _add_levers(commands, ("session_id", "SESSION_ID"), handlers, helps)
    lower = _leaf(commands, "lower", "bring a raised limit back down to the base", _session_lower)
    lower.add_argument("session_id", metavar="SESSION_ID")
    lower.add_argument("--category", required=True, help="category to lower, e.g. write")
    lower.add_argument("--reason", required=True, help="why (recorded in the audit trail)")
    listing = _leaf(commands, "list", "sessions blocked or suspended lately", _session_list)
    listing.add_argument("--state", choices=("active", "blocked", "expired", "suspended"))
    listing.add_argument("--since", help="ISO-8601 time (default: 24 hours ago)")


def _add_principal_commands(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    principal = root.add_parser(
        "principal", help="whom agents act for: a budget across all their sessions"
    )
    commands = principal.add_subparsers(dest="principal_command", required=True, metavar="COMMAND")
    helps = {
        "show": "windowed counters, limits and state",
        "raise": "raise one category's principal budget",
        "suspend": "refuse every call made for the principal, in every session",
        "resume": "lift a suspension (manual or automatic)",
        "reset": "zero the principal's counters in every window",
    }
    handlers = (_principal_show, _principal_raise, _principal_action)
    _add_levers(commands, ("principal", "PRINCIPAL"), handlers, helps)
    tenant = root.add_parser("tenant", help="the tenant's ceiling over all its servers")
    tenant_commands = tenant.add_subparsers(dest="tenant_command", required=True, metavar="COMMAND")
    _leaf(tenant_commands, "show", "counters, limits and windows of the tenant", _tenant_show)


def _add_grant_commands(root: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    grant = root.add_parser("grant", help="raises planned ahead for a principal")
    commands = grant.add_subparsers(dest="grant_command", required=True, metavar="COMMAND")
    add = _leaf(commands, "add", "grant a principal a higher limit for a time window", _grant_add)
    add.add_argument("--principal", required=True, help="who the agent acts for")
    add.add_argument("--category", required=True, help="category, e.g. write")
    add.add_argument("--limit", required=True, type=_positive_int, help="limit while open")
    add.add_argument("--starts-at", required=True, help="ISO-8601 with zone, e.g. ...T09:00Z")
    add.add_argument("--ends-at", required=True, help="ISO-8601 with zone")
    add.add_argument("--reason", required=True, help="why (recorded in the audit trail)")
    _leaf(commands, "list", "list this tenant's grants", _grant_list)
    remove = _leaf(commands, "rm", "delete a grant", _grant_rm)
    remove.add_argument("grant_id", metavar="GRANT_ID")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Administer mcp-quota: tokens, sessions, grants and the audit trail.",
        epilog="Exit codes: 0 ok, 1 unexpected, 2 usage/bad input, 3 not found, "
        "4 auth, 5 conflict, 6 service unavailable or unreachable.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    _http_options(parser, leaf=False)
    root = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_token_commands(root)
    _add_session_commands(root)
    _add_principal_commands(root)
    _add_grant_commands(root)
    approvals.add_commands(root, _leaf, _client)
    audit = _leaf(root, "audit", "list audit events: blocks, admin actions, notifications", _audit)
    audit.add_argument(
        "--session",
        help="this session's events, oldest first (default: every event of the tenant, "
        "newest first)",
    )
    audit.add_argument("--type", help="only events of this type (e.g. session_raised)")
    audit.add_argument("--principal", help="only events naming this principal")
    audit.add_argument("--server", help="only events of this MCP server's sessions")
    audit.add_argument("--since", help="only events at or after this ISO-8601 time")
    audit.add_argument("--until", help="only events at or before this ISO-8601 time")
    audit.add_argument("--limit", type=_positive_int, help="events per page")
    audit.add_argument("--next", help="page token from a previous answer")
    audit.add_argument("--all-pages", action="store_true", help="follow every page")
    shadow = _leaf(
        root,
        "shadow",
        "what shadow mode would have refused, by server, principal and tool",
        _shadow,
    )
    shadow.add_argument("--since", help="only refusals at or after this ISO-8601 time")
    return parser


def _emit(output: Output, as_json: bool) -> None:
    if as_json:
        print(json.dumps(output.data, indent=2))
        return
    print(render.escape_lines(output.text))
    if output.note:
        print(render.escape(output.note), file=sys.stderr)


def _silence_stdout() -> None:
    # Python flushes stdout again at exit; point it at devnull so that flush cannot fail.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    handler: Handler = args.handler
    try:
        output = handler(args, os.environ)
        _emit(output, args.json)
    except CliError as exc:
        print(f"{PROG}: error: {render.escape(exc.message)}", file=sys.stderr)
        return int(exc.exit_code)
    except BrokenPipeError:
        # The reader (e.g. `| head`) went away: stop quietly, as other CLIs do.
        _silence_stdout()
        return int(ExitCode.UNEXPECTED)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a CLI reports the fault; it does not dump a traceback
        message = render.escape(f"{type(exc).__name__}: {exc}")
        print(f"{PROG}: unexpected error: {message}", file=sys.stderr)
        return int(ExitCode.UNEXPECTED)
    return int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
