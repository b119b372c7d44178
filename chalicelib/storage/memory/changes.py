"""The core's changes (`quota.changes`) applied to an in-memory record: a dict per map
and one of fields. This translates; it decides nothing."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from chalicelib.quota.changes import Change, Field, Slot


@dataclass
class Row:
    """A record in memory: its maps, its fields, and (a session's) last calls."""

    maps: defaultdict[Slot, dict[str, Any]] = field(default_factory=lambda: defaultdict(dict))
    fields: dict[Field, Any] = field(default_factory=dict)
    calls: list[Any] = field(default_factory=list)


def apply(row: Row, change: Change) -> None:
    """Apply `change` to the row's maps and fields (the last calls are the caller's)."""
    maps, fields = row.maps, row.fields
    for slot in change.clear:
        kept = change.kept(slot)
        maps[slot] = {key: value for key, value in maps[slot].items() if key in kept}
    for slot, key in change.drop:
        maps[slot].pop(key, None)
    for slot, key, number in change.add:
        maps[slot][key] = maps[slot].get(key, 0) + number
    for slot, key, value in change.put:
        maps[slot][key] = value
    for name, number in change.bump:
        fields[name] = (fields.get(name) or 0) + number
    for name, value in change.set:
        fields[name] = value
    for name in change.unset:
        fields.pop(name, None)
    if change.start is not None:
        fields.setdefault(Field.STARTED, change.start)
        fields.setdefault(Field.LAST_SEEN, change.start)
