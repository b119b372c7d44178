"""The "would have refused" view of shadow mode: the tenant's `shadow_refusal` audit
events grouped by server, principal and tool, busiest first. The API, the CLI and the
console all show this one grouping."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from chalicelib.clock import iso_utc
from chalicelib.quota.events import AuditEvent, EventType
from chalicelib.storage.ports import AuditFilter, AuditLog

if TYPE_CHECKING:
    from chalicelib.api.schemas import ShadowGroup, ShadowView

PAGE = 500
MAX_PAGES = 20  # at most 10,000 events per view: past that, `truncated` says so


def shadow_groups(events: Iterable[AuditEvent]) -> list[ShadowGroup]:
    """The shadow refusals among `events`, one row per server, principal and tool."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for event in events:
        if event.type is not EventType.SHADOW_REFUSAL:
            continue
        detail: Mapping[str, Any] = event.detail if isinstance(event.detail, Mapping) else {}
        server, principal, tool = (
            str(detail.get(k) or "-") for k in ("server", "principal", "tool")
        )
        group = groups.setdefault(
            (server, principal, tool),
            {
                "server": server,
                "principal": principal,
                "tool": tool,
                "refusals": 0,
                "categories": set(),
                "scopes": set(),
                "sessions": set(),
                "first_ms": event.at_ms,
                "last_ms": event.at_ms,
            },
        )
        group["refusals"] += 1
        group["categories"].add(str(detail.get("category")))
        group["scopes"].add(str(detail.get("scope")))
        group["sessions"].add(str(detail.get("session_id")))
        group["first_ms"] = min(group["first_ms"], event.at_ms)
        group["last_ms"] = max(group["last_ms"], event.at_ms)
    rows = sorted(groups.values(), key=lambda g: (-g["refusals"], g["server"], g["tool"]))
    return [
        {
            "server": g["server"],
            "principal": g["principal"],
            "tool": g["tool"],
            "refusals": g["refusals"],
            "sessions": len(g["sessions"]),
            "categories": sorted(g["categories"]),
            "scopes": sorted(g["scopes"]),
            "first": iso_utc(g["first_ms"]),
            "last": iso_utc(g["last_ms"]),
        }
        for g in rows
    ]


def shadow_view(audit_log: AuditLog, tenant: str, since_ms: int) -> ShadowView:
    """The view over the tenant's trail since `since_ms`: its `shadow_refusal` events,
    read by type (one Query a page).

    Raises:
        StorageError: the store failed.
    """
    where = AuditFilter(type=EventType.SHADOW_REFUSAL, since_ms=since_ms)
    events: list[AuditEvent] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        page = audit_log.feed(tenant, where, PAGE, token)
        events.extend(page.events)
        token = page.next_token
        if not token:
            break
    return {"groups": shadow_groups(events), "truncated": bool(token)}
