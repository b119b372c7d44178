"""Plain-text rendering for the CLI: aligned tables and key/value blocks, no dependencies.

Text from the service or the store is never trusted on a terminal: everything printed goes
through `escape`, so a stored escape sequence, carriage return, bidi override or lone
surrogate is shown as a backslash escape instead of being obeyed (or failing to encode).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EMPTY = "-"
TIMES = "\N{MULTIPLICATION SIGN}"
MAX_CELL = 60
# Control (C0, DEL, C1), format (bidi overrides, zero-width) and surrogate characters.
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(char: str) -> str:
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape(text: str) -> str:
    """`text` safe to print: control, format and surrogate characters backslash-escaped.

    Idempotent: the result holds none of those characters, so escaping again changes nothing.
    """
    if text.isprintable():
        return text
    return "".join(
        _escape_char(char) if unicodedata.category(char) in _UNSAFE_CATEGORIES else char
        for char in text
    )


def escape_lines(text: str) -> str:
    """`escape` applied line by line, keeping the line breaks the CLI itself wrote."""
    return "\n".join(escape(line) for line in text.split("\n"))


@dataclass(frozen=True)
class Output:
    """A command's result: JSON for scripts (`--json`), text for people, an optional hint."""

    data: Any
    text: str
    note: str | None = None


def cell(value: Any, max_width: int | None = None) -> str:
    """One value as table text: `-` for nothing, compact JSON for structures."""
    if value is None or value == "":
        text = EMPTY
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, Mapping | list):
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    else:
        text = str(value)
    # Stored line breaks become `\\n` and other whitespace runs one space: a row stays one line.
    text = " ".join(escape(text).split())
    if max_width is not None and len(text) > max_width:
        text = text[: max_width - 1] + "…"
    return text


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """An aligned table with a header line; the last column is not padded."""
    body = [[cell(v, MAX_CELL) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    lines = []
    for row in [list(headers), *body]:
        padded = [text.ljust(widths[i]) for i, text in enumerate(row)]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """`Label:  value` lines with the values aligned."""
    width = max((len(label) for label, _ in pairs), default=0) + 1
    return "\n".join(f"{(label + ':').ljust(width)}  {cell(value)}" for label, value in pairs)


def change(before: Any, after: Any) -> str:
    """A before/after pair: `b -> a`; for two objects, only what changed, keys named."""
    if before is None and after is None:
        return EMPTY
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        parts = []
        for key in [*before, *(k for k in after if k not in before)]:
            old, new = before.get(key), after.get(key)
            if old == new:
                parts.append(f"{cell(key)}={cell(old)}")
            else:
                parts.append(f"{cell(key)}: {cell(old)} -> {cell(new)}")
        return ", ".join(parts) or EMPTY
    return f"{cell(before)} -> {cell(after)}"


def client_name(client: Any) -> str | None:
    """The MCP client in a listing's column: "name version", None when neither is known."""
    if not isinstance(client, Mapping):
        return None
    return " ".join(str(client[k]) for k in ("name", "version") if client.get(k)) or None


def client_text(client: Any) -> str | None:
    """The MCP client as every view words it: "name version, OAuth client id"."""
    if not isinstance(client, Mapping):
        return None
    named, oauth = client_name(client), client.get("oauth_client_id")
    return ", ".join(p for p in (named, oauth and f"OAuth client {oauth}") if p) or None


def session_view(session: Mapping[str, Any]) -> str:
    """A session: identity and state, a row per category, then its last calls."""
    pairs: list[tuple[str, Any]] = [
        ("Session", session.get("session_id")),
        ("Tenant", session.get("tenant")),
        ("State", session.get("state")),
    ]
    if session.get("suspended_reason"):
        pairs.append(("Suspended", session.get("suspended_reason")))
    pairs += [
        ("Server", session.get("server")),
        ("Client", client_text(session.get("client"))),
        ("Principal", session.get("principal")),
        ("Started", session.get("first_call_at") or session.get("started_at")),
        ("Last call", session.get("last_call_at") or session.get("last_seen_at")),
        ("Resets at", session.get("resets_at")),
    ]
    parts = [fields(pairs)]
    categories = session.get("categories")
    if isinstance(categories, Mapping) and categories:
        parts.append(_categories(categories))
    calls = session.get("last_calls")
    if isinstance(calls, list) and calls:
        parts.append("Last calls:\n" + _calls(calls))
    else:
        parts.append("Last calls: none")
    return "\n\n".join(parts)


def budget_view(budget: Mapping[str, Any]) -> str:
    """A principal's or the tenant's budget: identity and state, a row per category."""
    pairs: list[tuple[str, Any]] = []
    if budget.get("scope") == "principal":
        pairs.append(("Principal", budget.get("principal")))
    pairs += [
        ("Tenant", budget.get("tenant")),
        ("State", budget.get("state")),
    ]
    if budget.get("suspended_reason"):
        pairs.append(("Suspended", budget.get("suspended_reason")))
    by_category = budget.get("streaks") or {}
    shown = ", ".join(f"{name} {n}" for name, n in by_category.items()) or "0"
    streak = f"{shown} (suspended at {cell(budget.get('suspend_after_refusals'))} in one category)"
    pairs.append(("Refused in a row", streak))
    headers = ("CATEGORY", "USED", "LIMIT", "BASE", "RAISED", "REMAINING", "WINDOW", "RESETS AT")
    categories = budget.get("categories")
    rows = [
        (
            name,
            c.get("used"),
            c.get("limit"),
            c.get("base_limit"),
            c.get("raised_limit"),
            c.get("remaining"),
            f"{cell(c.get('window_seconds'))}s",
            c.get("resets_at"),
        )
        for name, c in sorted(categories.items() if isinstance(categories, Mapping) else [])
        if isinstance(c, Mapping)
    ]
    body = table(headers, rows) if rows else "No category has a budget at this scope."
    return f"{fields(pairs)}\n\n{body}"


HELD_NOTE = "held: answered by the MCP server without asking, during a refusal's hold"


def _categories(categories: Mapping[str, Any]) -> str:
    # LEASED: of USED, calls counted at once in leases (a client spends them locally).
    headers = ("CATEGORY", "USED", "LEASED", "LIMIT", "BASE", "RAISED", "REMAINING", "REFUSED")
    rows = [
        (
            name,
            c.get("used"),
            c.get("leased"),
            c.get("limit"),
            c.get("base_limit"),
            c.get("raised_limit"),
            c.get("remaining"),
            _refused(c),
        )
        for name, c in sorted(categories.items())
        if isinstance(c, Mapping)
    ]
    held = any(isinstance(c, Mapping) and c.get("refused_held") for c in categories.values())
    return table(headers, rows) + (f"\n{HELD_NOTE}" if held else "")


def _refused(category: Mapping[str, Any]) -> object:
    """One refused count, with the refusals the MCP server held (the console's words)."""
    held = category.get("refused_held")
    if isinstance(held, int) and held > 0:
        return f"{category.get('refused')} ({held} held)"
    return category.get("refused")


def _outcome(call: Mapping[str, Any]) -> str:
    """Allowed, replay or refused (the console's and the email's words): a replay is a
    client's retry of a call id already counted, answered `duplicate` and not counted
    again; a run of refusals of one tool is one row with a count."""
    if call.get("replay"):
        return "replay"
    if call.get("allowed"):
        return "allowed"
    repeats = call.get("repeats")
    held = call.get("held")
    if isinstance(repeats, int) and repeats > 1 and isinstance(held, int) and held > 0:
        return f"refused {TIMES}{repeats} in a row ({held} held)"
    if isinstance(repeats, int) and repeats > 1:
        return f"refused {TIMES}{repeats} in a row"
    return "refused"


def _calls(calls: list[Any]) -> str:
    headers = ("AT", "TOOL", "CATEGORY", "RESULT", "CALL ID", "PRINCIPAL")
    rows = [
        (
            c.get("at"),
            c.get("tool"),
            c.get("category"),
            _outcome(c),
            c.get("call_id"),
            c.get("principal"),
        )
        for c in calls
        if isinstance(c, Mapping)
    ]
    return table(headers, rows)


GRANT_HEADERS = ("GRANT ID", "PRINCIPAL", "CATEGORY", "LIMIT", "STARTS", "ENDS", "BY", "REASON")


def grant_row(grant: Mapping[str, Any]) -> tuple[Any, ...]:
    """One grant as a table row matching `GRANT_HEADERS`."""
    return (
        grant.get("grant_id"),
        grant.get("principal"),
        grant.get("category"),
        grant.get("limit"),
        grant.get("starts_at"),
        grant.get("ends_at"),
        grant.get("created_by"),
        grant.get("reason"),
    )


def grants(items: Sequence[Mapping[str, Any]]) -> str:
    """Grants as a table, or a line saying there are none."""
    if not items:
        return "No grants."
    return table(GRANT_HEADERS, [grant_row(g) for g in items])


def grant_view(grant: Mapping[str, Any]) -> str:
    """One grant as a key/value block."""
    return fields(
        [
            ("Grant", grant.get("grant_id")),
            ("Principal", grant.get("principal")),
            ("Category", grant.get("category")),
            ("Limit", grant.get("limit")),
            ("Starts", grant.get("starts_at")),
            ("Ends", grant.get("ends_at")),
            ("Reason", grant.get("reason")),
            ("Created by", grant.get("created_by")),
            ("Created at", grant.get("created_at")),
        ]
    )


def audit_events(events: Sequence[Mapping[str, Any]]) -> str:
    """Audit events as a table, or a line saying there are none."""
    if not events:
        return "No audit events."
    headers = (
        "AT",
        "TYPE",
        "SESSION",
        "PRINCIPAL",
        "SERVER",
        "ACTOR",
        "REASON",
        "CHANGE",
        "DETAIL",
    )
    rows = [
        (
            e.get("at"),
            e.get("type"),
            e.get("session_id"),
            e.get("principal"),
            e.get("server"),
            e.get("actor"),
            e.get("reason"),
            change(e.get("before"), e.get("after")),
            e.get("detail"),
        )
        for e in events
    ]
    return table(headers, rows)
