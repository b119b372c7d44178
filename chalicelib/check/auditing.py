"""Recording audit events: in the audit table and in the logs.

Every event is written to the audit table and also emitted as a structured log line, so
a failed table write never loses the event: the log keeps it, and a metric counts it.
"""

from __future__ import annotations

from typing import Protocol

from chalicelib.observability import count, logger
from chalicelib.quota.events import AuditEvent


class AuditSink(Protocol):
    """Where audit events go (the audit log port)."""

    def put(self, event: AuditEvent) -> None:
        """Store one event.

        Raises:
            StorageError: the store failed.
        """


class Auditor:
    """Records events in the audit table and in the logs; a failed write is logged with
    the whole event and counted, never raised: an audit outage must not change a decision."""

    def __init__(self, sink: AuditSink) -> None:
        self._sink = sink

    def record(self, event: AuditEvent) -> bool:
        """Record one event; returns whether the table write succeeded."""
        logger.info("audit event", extra={"audit": event.to_json()})
        try:
            self._sink.put(event)
        except Exception as exc:
            logger.error(
                "audit write failed; the event above is the record",
                extra={"audit": event.to_json(), "error": f"{type(exc).__name__}: {exc}"},
            )
            count("AuditWriteFailed")
            return False
        return True
