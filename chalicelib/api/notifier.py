"""The notifier function: refusals' emails, off the request path. Its own Lambda
function imports this module alone (handler `chalicelib.api.notifier.notifier`)."""

from __future__ import annotations

from typing import Any

from chalice.app import Blueprint, SQSEvent

from chalicelib.api.context import deps
from chalicelib.api.deferred import notify
from chalicelib.observability import count

notifications = Blueprint(__name__)

# The queue's name as `chalice package` writes it; the merge template points the event
# source at the stack's own queue (deploy/build_template.py).
NOTIFY_QUEUE = "mcp-quota-notifications"


# A batch fits the function's timeout even if every publish takes its worst
# (BATCH_SIZE x notify.PUBLISH_WORST_MS = 24 s < 30 s); `deliver` defers what would not.
BATCH_SIZE = 3


@notifications.on_sqs_message(queue=NOTIFY_QUEUE, batch_size=BATCH_SIZE, name="notifier")
def notifier(event: SQSEvent) -> dict[str, Any]:
    """Publish queued emails to SNS; SQS delivers the failed and deferred ones again, then
    keeps the failed in the dead-letter queue (partial batch answer: the sent ones are not
    repeated)."""
    messages = ((record.to_dict()["messageId"], record.body) for record in event)
    # Chalice types the context as a dict; Lambda passes its context object.
    time_left = getattr(event.context, "get_remaining_time_in_millis", None)
    delivered = notify.deliver(messages, deps().sns_notifier, time_left)
    for category in delivered.failed_categories:
        count("NotificationFailed", category or None)
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in delivered.again]}
