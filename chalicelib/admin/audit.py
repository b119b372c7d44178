"""Who an administrator's audited action names as its actor."""

from __future__ import annotations

LINK_ROLE = "link"  # an emailed one-click link acting: audited as its actor, with its id


def actor_of(token_id: str, role: str) -> str:
    """The audit actor of an administrator's action: the token and its role, or the
    email link (`email-link`) for an action taken through one."""
    return token_id if role == LINK_ROLE else f"{token_id} ({role})"


def link_detail(role: str, name: str) -> dict[str, str] | None:
    """The audit detail naming the link an action was taken through (its id and
    action, `<link id>:<action>` in the link's identity), if any."""
    if role != LINK_ROLE:
        return None
    link_id, _, action = name.partition(":")
    return {"link_id": link_id, "link_action": action} if action else {"link_id": link_id}
