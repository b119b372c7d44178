"""Call results (exactly-once writes) on the counters table: one item per kept result,
written once with a conditional UpdateItem. Its TTL is clean-up only: expiry is checked in
the condition and by the core on read.

Item: pk "<tenant> call-result <session id> <call id, kept form>" (spaces, which no
session id holds), tool, dig (sha256 hex), size, res (the canonical JSON; absent when cut),
at (stored, epoch ms), exp (expiry, epoch ms), expires_at (TTL, epoch s).
"""

from __future__ import annotations

import json
from typing import Any

from chalicelib.quota.core import call_id_key
from chalicelib.quota.results import CallResult, ResultKey, canonical
from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.updates import ConditionFailed, Table, n, s

_NAMES = {
    "#pk": "pk",
    "#tool": "tool",
    "#dig": "dig",
    "#size": "size",
    "#res": "res",
    "#at": "at",
    "#exp": "exp",
    "#ttl": "expires_at",
}
# First write wins; an expired result (TTL deletion can lag by days) is free again.
# An UpdateItem, not a PutItem: the API role already may update the counters table.
PUT_CONDITION = "attribute_not_exists(#pk) OR #exp <= :now"
_SET = "SET #tool = :tool, #dig = :dig, #size = :size, #at = :at, #exp = :exp, #ttl = :ttl"
KEEP_UPDATE = _SET + ", #res = :res"
DIGEST_UPDATE = _SET + " REMOVE #res"  # over 64 KiB: an expired predecessor's text goes


def _key(key: ResultKey) -> dict[str, Any]:
    return {"pk": s(f"{key.tenant} call-result {key.session_id} {call_id_key(key.call_id)}")}


def _values(result: CallResult) -> dict[str, Any]:
    values = {
        ":tool": s(result.tool),
        ":dig": s(result.digest),
        ":size": n(result.size),
        ":at": n(result.stored_ms),
        ":exp": n(result.expires_ms),
        ":ttl": n(result.expires_ms // 1000 + 1),
        ":now": n(result.stored_ms),
    }
    if result.result is not None:
        values[":res"] = s(canonical(result.result).decode())
    return values


def _result(key: ResultKey, item: dict[str, Any]) -> CallResult:
    raw = item.get("res")
    return CallResult(
        key=key,
        tool=item["tool"]["S"],
        digest=item["dig"]["S"],
        size=int(item["size"]["N"]),
        result=json.loads(raw["S"]) if raw else None,
        stored_ms=int(item["at"]["N"]),
        expires_ms=int(item["exp"]["N"]),
    )


class ResultStore(Table):
    """Keeps call results once and reads them back (`quota.results.CallResults`)."""

    def put_first(self, result: CallResult) -> CallResult | None:
        """Keep `result` unless a live one is kept: None if now kept, else the first.

        Raises:
            StorageError: the store failed.
        """
        update = DIGEST_UPDATE if result.truncated else KEEP_UPDATE
        try:
            updates.update(
                self._client,
                self._table,
                _key(result.key),
                update,
                PUT_CONDITION,
                _NAMES,
                _values(result),
                "keeping a call result",
                returns="NONE",
                old_on_failure=True,
            )
        except ConditionFailed as failed:
            # dynalite ignores ReturnValuesOnConditionCheckFailure: read the winner then.
            old = failed.old_item
            first = _result(result.key, dict(old)) if old else self.get(result.key)
            if first is None:  # the winner expired and was deleted meanwhile: try again
                return self.put_first(result)
            return first
        return None

    def get(self, key: ResultKey) -> CallResult | None:
        """The result kept under `key` (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """
        item = updates.get(self._client, self._table, _key(key), "reading a call result")
        return _result(key, item) if item else None
