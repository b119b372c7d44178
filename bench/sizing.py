"""DynamoDB's item-size rules, for write units from a stored item (low-level JSON form).

Per the DynamoDB developer guide ("DynamoDB item sizes and formats"): an attribute costs
the UTF-8 bytes of its name plus its value; strings are their UTF-8 bytes, numbers one
byte per two significant digits plus one, binaries their raw bytes, booleans and nulls
one byte; a list or map costs 3 bytes plus one byte per element plus the elements (map
keys count as names). One standard write unit covers 1 KB of the larger of the item's
before and after images.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

WRITE_UNIT_BYTES = 1024


def number_size(text: str) -> int:
    """Bytes of a DynamoDB number: 1 per two significant digits, plus 1."""
    digits = format(abs(Decimal(text)), "f").replace(".", "").strip("0")
    return math.ceil(max(1, len(digits)) / 2) + 1


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one typed value (`{"S": ...}`, `{"N": ...}`, `{"L": [...]}` ...)."""
    [(kind, raw)] = value.items()
    if kind == "S":
        return len(str(raw).encode("utf-8"))
    if kind == "N":
        return number_size(str(raw))
    if kind == "B":
        return len(raw if isinstance(raw, bytes) else base64.b64decode(raw))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(s.encode("utf-8")) for s in raw)
    if kind == "NS":
        return sum(number_size(n) for n in raw)
    if kind == "BS":
        return sum(len(b) for b in raw)
    if kind == "L":
        return 3 + sum(1 + value_size(v) for v in raw)
    if kind == "M":
        return 3 + sum(1 + len(k.encode("utf-8")) + value_size(v) for k, v in raw.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Mapping[str, Mapping[str, Any]]) -> int:
    """Bytes of a whole item: names plus values."""
    return sum(len(name.encode("utf-8")) + value_size(v) for name, v in item.items())


def write_units(*images: Mapping[str, Mapping[str, Any]]) -> int:
    """Standard write units of one write, from the item's before/after images."""
    largest = max((item_size(image) for image in images), default=0)
    return max(1, math.ceil(largest / WRITE_UNIT_BYTES))
