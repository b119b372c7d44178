"""The last-calls lists this container last saw, per session: a check that knows them
writes the list shifted by one in its own write, instead of appending and trimming."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from chalicelib.quota.calls import CallLife, gone_lives
from chalicelib.quota.core import CallRecord
from chalicelib.storage.dynamodb.codec import decode_call, decode_life, encode_call, stored_id
from chalicelib.storage.dynamodb.expressions import SAME_TAIL
from chalicelib.storage.dynamodb.layout import (
    BLOCKED,
    CALL_IDS,
    CALLS,
    COUNTED_CALL_ID,
    LIFE_PREFIX,
    RAISED_PREFIX,
    REPEAT_PREFIX,
)
from chalicelib.storage.dynamodb.updates import n as _n
from chalicelib.storage.dynamodb.updates import s as _s


@dataclass(frozen=True)
class Tail:
    """A session's last-calls lists as stored: `calls` texts and `cids` entries."""

    texts: tuple[str, ...]
    ids: tuple[str, ...]
    raised: frozenset[str] = frozenset()  # categories with a per-session raise
    repeats: tuple[str, ...] = ()  # the loop breaker's keys: the next count drops ended ones
    # call ids with a life, and the life: the next count drops those gone
    lives: Mapping[str, CallLife | None] = field(default_factory=dict)

    @classmethod
    def of(cls, item: Mapping[str, Any]) -> Tail | None:
        texts = tuple(v["S"] for v in item.get(CALLS, {}).get("L", []))
        ids = tuple(v["S"] for v in item.get(CALL_IDS, {}).get("L", []))
        raised = frozenset(
            name[len(RAISED_PREFIX) :] for name in item if name.startswith(RAISED_PREFIX)
        )
        repeats = tuple(
            name[len(REPEAT_PREFIX) :] for name in item if name.startswith(REPEAT_PREFIX)
        )
        lives = {
            name[len(LIFE_PREFIX) :]: decode_life(value.get("S", ""))
            for name, value in item.items()
            if name.startswith(LIFE_PREFIX)
        }
        return cls(texts, ids, raised, repeats, lives) if len(texts) == len(ids) else None

    def gone_lives(self, now_ms: int) -> tuple[str, ...]:
        """The lives a counted call's write drops, as these lists show them."""
        held = {i[len(COUNTED_CALL_ID) :] for i in self.ids if i.startswith(COUNTED_CALL_ID)}
        return gone_lives(self.lives, held, now_ms)

    def same_lists(self, other: Tail | None) -> bool:
        return other is not None and (self.texts, self.ids) == (other.texts, other.ids)

    def folds(self, record: CallRecord) -> bool:
        """Whether `record` repeats the refusal that ends the lists (and folds into it)."""
        if not self.ids or not self.ids[-1].startswith(BLOCKED):
            return False
        return record.repeats_of(decode_call(self.texts[-1], self.ids[-1], None))

    def adding(self, record: CallRecord, keep: int) -> Tail:
        """The lists with `record` added: folded into the last entry when it repeats a
        refusal, else appended; then the last `keep` entries."""
        text, entry = encode_call(record), stored_id(record)
        if self.folds(record):
            last = decode_call(self.texts[-1], self.ids[-1], None)
            folded = encode_call(record.folded_onto(last))
            return replace(self, texts=(*self.texts[:-1], folded), ids=(*self.ids[:-1], entry))
        return replace(self, texts=(*self.texts, text)[-keep:], ids=(*self.ids, entry)[-keep:])

    def replacing_last(self, text: str, entry: str) -> Tail:
        """The lists with their last entry replaced (a call taken back, shown refused)."""
        return replace(self, texts=(*self.texts[:-1], text), ids=(*self.ids[:-1], entry))

    def condition(self) -> str:
        """That the stored lists still end as these do (no other writer came between)."""
        if not self.ids:
            return "(attribute_not_exists(#ids) OR size(#ids) = :len)"
        return SAME_TAIL.format(last=len(self.ids) - 1)

    def values(self, new: Tail) -> dict[str, Any]:
        """This tail's condition values, and the lists to write."""
        values: dict[str, Any] = {
            ":len": _n(len(self.ids)),
            ":calls": {"L": [_s(t) for t in new.texts]},
            ":ids": {"L": [_s(i) for i in new.ids]},
        }
        if self.ids:
            values[":tail"] = _s(self.ids[-1])
        return values


class Tails:
    """The last-calls lists this container last saw, per session (least recently used
    dropped first). A stale entry costs one failed condition, never a wrong record."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._tails: OrderedDict[str, Tail] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Tail | None:
        with self._lock:
            return self._tails.get(key)

    def learn(self, key: str, item: Mapping[str, Any] | None) -> None:
        """Remember the lists of an item as just read or written (None: it is gone)."""
        tail = Tail.of(item) if item else None
        self.put(key, tail)

    def put(self, key: str, tail: Tail | None) -> None:
        with self._lock:
            if tail is None:
                self._tails.pop(key, None)
                return
            self._tails[key] = tail
            self._tails.move_to_end(key)
            if len(self._tails) > self._size:
                self._tails.popitem(last=False)
