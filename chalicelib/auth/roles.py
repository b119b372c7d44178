"""Roles and what each may do, and how an identity provider's groups name a tenant and a
role: the one place either is decided (static tokens and signed-in people alike)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class Role(StrEnum):
    """A caller's role; stored as its value on a token."""

    SERVER = "server"  # an MCP server: checks and lease returns only
    VIEWER = "viewer"  # reads only
    OPERATOR = "operator"  # reads, and acts on sessions and principals
    ADMIN = "admin"  # everything, tokens and grants included


class Permission(StrEnum):
    """What a route needs."""

    CHECK = "check"  # SERVER_ROUTES
    READ = "read"  # every GET of the admin API
    ACT = "act"  # raise, lower, suspend, resume, reset a session or a principal
    MANAGE = "manage"  # tokens, grants


GRANTS: dict[Role, frozenset[Permission]] = {
    Role.SERVER: frozenset({Permission.CHECK}),
    Role.VIEWER: frozenset({Permission.READ}),
    Role.OPERATOR: frozenset({Permission.READ, Permission.ACT}),
    Role.ADMIN: frozenset(Permission),
}
# The routes a server token may call (the authorizer lets it reach no other), as
# `METHOD path`; a path parameter is `{name}`.
SERVER_ROUTES = (
    "POST /v1/check",
    "GET /v1/policy",
    "POST /v1/leases/return",
    "PUT /v1/results/{call_id}",
    "GET /v1/results/{call_id}",
)
SERVER_ONLY = f"A server token may only call the check routes: {', '.join(SERVER_ROUTES)}."
# The roles a person (the console, an identity provider's group) may hold, weakest first.
PERSON_ROLES = (Role.VIEWER, Role.OPERATOR, Role.ADMIN)
# What a refusal tells the caller it would need.
NEEDED = {
    Permission.CHECK: "a server or admin token",
    Permission.READ: "the viewer, operator or admin role",
    Permission.ACT: "the operator or admin role",
    Permission.MANAGE: "the admin role",
}


def may(role: str, permission: Permission) -> bool:
    """Whether a role (as stored: a string) holds a permission; an unknown role holds none."""
    try:
        return permission in GRANTS[Role(role)]
    except ValueError:
        return False


def refusal(role: str, permission: Permission) -> str:
    """The 403's message for a role that lacks a permission."""
    said = f"Your role ({role}) may not do this: it needs {NEEDED[permission]}."
    if role == Role.VIEWER:
        return f"{said} A viewer may only read."
    if role == Role.SERVER:
        return f"{said} {SERVER_ONLY}"
    return said


# A group naming a tenant and a role: `mcp-quota:<tenant>:<role>`, e.g. mcp-quota:acme:operator.
GROUP_PREFIX = "mcp-quota:"


@dataclass(frozen=True)
class Membership:
    """The tenant and the role an identity provider's groups give a person."""

    tenant: str
    role: Role


class NoMembership(Exception):
    """The token's groups name no tenant and role, or more than one tenant."""


def membership(claims: Mapping[str, Any], groups_claim: str) -> Membership:
    """The tenant and strongest role named by `mcp-quota:<tenant>:<role>` groups in the
    claim `groups_claim` (a list, or one space-separated string); other groups are ignored.

    Raises:
        NoMembership: no such group, or groups of more than one tenant.
    """
    raw = claims.get(groups_claim)
    groups = raw.split() if isinstance(raw, str) else raw if isinstance(raw, list) else []
    found: dict[str, Role] = {}
    for group in groups:
        if not isinstance(group, str) or not group.startswith(GROUP_PREFIX):
            continue
        tenant, _, role_name = group[len(GROUP_PREFIX) :].rpartition(":")
        role = next((r for r in PERSON_ROLES if r.value == role_name), None)
        if role is None or not TENANT_NAME.fullmatch(tenant):
            continue
        held = found.get(tenant)
        if held is None or PERSON_ROLES.index(role) > PERSON_ROLES.index(held):
            found[tenant] = role
    if not found:
        raise NoMembership(f"no group {GROUP_PREFIX}<tenant>:<viewer|operator|admin>")
    if len(found) > 1:
        raise NoMembership(f"groups of more than one tenant ({', '.join(sorted(found))})")
    ((tenant, role),) = found.items()
    return Membership(tenant, role)


def person_name(claims: Mapping[str, Any]) -> str:
    """How the audit trail and the console name a signed-in person."""
    for claim in ("email", "preferred_username", "cognito:username", "username", "sub"):
        value = claims.get(claim)
        if isinstance(value, str) and value:
            return "".join(c for c in value if c.isprintable())[:128]
    return "unknown"
