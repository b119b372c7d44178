"""`mcp-quota approvals`: list, show, approve and deny approvals of single calls
(issue 32) through the admin API."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from admin_cli.api_client import AdminClient, quote_segment
from admin_cli.commands import check_reason
from admin_cli.errors import CliError, ExitCode
from admin_cli.render import Output, fields, table

STATES = ("pending", "approved", "denied", "used", "expired")
HEADERS = ("ID", "STATE", "TOOL", "PRINCIPAL", "ARGUMENTS", "EXPIRES")
ClientOf = Callable[[argparse.Namespace, Mapping[str, str]], AdminClient]
Leaf = Callable[..., argparse.ArgumentParser]


def _path(approval_id: str) -> str:
    """The approval's URL path.

    Raises:
        CliError: the id is blank.
    """
    if not approval_id.strip():
        raise CliError("The approval id must not be blank.", ExitCode.USAGE)
    return f"/v1/approvals/{quote_segment(approval_id)}"


def view(approval: Mapping[str, Any]) -> str:
    """One approval as a key/value block."""
    return fields(
        [
            ("Approval", approval.get("id")),
            ("State", approval.get("state")),
            ("Tool", approval.get("tool")),
            ("Arguments", approval.get("arguments_preview")),
            ("Digest", approval.get("args_digest")),
            ("Principal", approval.get("principal")),
            ("Session", approval.get("session_id")),
            ("Server", approval.get("server")),
            ("Expires", approval.get("expires_at")),
            ("Decided by", approval.get("decided_by")),
            ("Reason", approval.get("reason")),
        ]
    )


def listed(client: AdminClient, state: str | None) -> Output:
    """`approvals list`: the tenant's approvals, newest first.

    Raises:
        CliError: the request failed.
    """
    data = client.call("GET", "/v1/approvals" + (f"?state={state}" if state else ""))
    items = data.get("approvals") if isinstance(data, Mapping) else None
    if not isinstance(items, list):
        raise CliError("The service's answer has no 'approvals' list.", ExitCode.UNEXPECTED)
    if not items:
        return Output(data, "No approvals.")
    rows = [
        [a.get(k) for k in ("id", "state", "tool", "principal", "arguments_preview", "expires_at")]
        for a in items
    ]
    return Output(data, table(HEADERS, rows))


def show(client: AdminClient, approval_id: str) -> Output:
    """`approvals show`: one approval.

    Raises:
        CliError: the id is blank or the request failed (404 when unknown).
    """
    data = client.call("GET", _path(approval_id))
    return Output(data, view(data))


def decide(client: AdminClient, approval_id: str, approve: bool, reason: str | None) -> Output:
    """`approvals approve|deny`: decide a pending approval.

    Raises:
        CliError: bad input, or the request failed (409 when no longer pending).
    """
    body = {"reason": check_reason(reason)} if reason else {}
    action = "approve" if approve else "deny"
    data = client.call("POST", f"{_path(approval_id)}/{action}", body)
    done = "Approved: the call may run once." if approve else "Denied."
    return Output(data, f"{done}\n\n{view(data)}")


def add_commands(
    root: argparse._SubParsersAction[argparse.ArgumentParser], leaf: Leaf, client_of: ClientOf
) -> None:
    """Register `approvals list|show|approve|deny`."""
    group = root.add_parser("approvals", help="approve or deny single tool calls")
    commands = group.add_subparsers(dest="approvals_command", required=True, metavar="COMMAND")
    listing = leaf(
        commands, "list", "list approvals", lambda a, e: listed(client_of(a, e), a.state)
    )
    listing.add_argument("--state", choices=STATES, help="only approvals in this state")
    one = leaf(commands, "show", "show one approval", lambda a, e: show(client_of(a, e), a.id))
    one.add_argument("id", metavar="APPROVAL_ID")
    for name, approve in (("approve", True), ("deny", False)):
        parser = leaf(
            commands,
            name,
            f"{name} a pending approval (operator or admin)",
            lambda a, e, approve=approve: decide(client_of(a, e), a.id, approve, a.reason),
        )
        parser.add_argument("id", metavar="APPROVAL_ID")
        parser.add_argument("--reason", help="why (recorded in the audit trail)")
