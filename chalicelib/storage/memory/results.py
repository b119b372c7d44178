"""In-memory call results (exactly-once writes)."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

from chalicelib.quota.core import call_id_key
from chalicelib.quota.results import CallResult, ResultKey, canonical


def _copy(result: CallResult) -> CallResult:
    """A copy no caller can change under the store, as the JSON the table would hold."""
    body = None if result.result is None else json.loads(canonical(result.result))
    return replace(result, result=body)


class MemoryResults:
    """Call results in a dict, under one lock; first write wins, as on DynamoDB."""

    def __init__(self) -> None:
        self._results: dict[tuple[str, str, str], CallResult] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _slot(key: ResultKey) -> tuple[str, str, str]:
        return (key.tenant, key.session_id, call_id_key(key.call_id))

    def put_first(self, result: CallResult) -> CallResult | None:
        """None if `result` is now kept, else the live result kept first."""
        with self._lock:
            first = self._results.get(self._slot(result.key))
            if first is not None and first.expires_ms > result.stored_ms:
                return _copy(first)
            self._results[self._slot(result.key)] = _copy(result)
            return None

    def get(self, key: ResultKey) -> CallResult | None:
        """The result kept under `key`, or None."""
        with self._lock:
            found = self._results.get(self._slot(key))
            return None if found is None else _copy(found)
