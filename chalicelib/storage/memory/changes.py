"""The core's changes (`quota.changes`) applied to an in-memory record: each map is a dict
attribute, each field an attribute. This translates; it decides nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chalicelib.quota.changes import Change, Field, Slot


def apply(
    record: object, change: Change, maps: Mapping[Slot, str], fields: Mapping[Field, str]
) -> None:
    """Apply `change` to `record`, whose maps and fields are the attributes named."""
    found: dict[Slot, dict[str, Any]] = {slot: getattr(record, name) for slot, name in maps.items()}
    for slot in change.clear:
        kept = change.kept(slot)
        for key in [key for key in found[slot] if key not in kept]:
            del found[slot][key]
    for slot, key in change.drop:
        found[slot].pop(key, None)
    for slot, key, number in change.add:
        found[slot][key] = found[slot].get(key, 0) + number
    for slot, key, value in change.put:
        found[slot][key] = value
    for name, number in change.bump:
        setattr(record, fields[name], (getattr(record, fields[name]) or 0) + number)
    for name, value in change.set:
        setattr(record, fields[name], value)
    for name in change.unset:
        setattr(record, fields[name], None)
