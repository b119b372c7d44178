"""The notifier function: refusals' emails, off the request path. Its own Lambda
function imports this module alone (handler `chalicelib.api.notifier.notifier`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from chalice.app import Blueprint, SQSEvent

from chalicelib.api.context import deps
from chalicelib.lazy import lazy_module
from chalicelib.observability import count

if TYPE_CHECKING:
    from chalicelib import notify
else:
    notify = lazy_module("chalicelib.notify")

notifications = Blueprint(__name__)

# The queue's name as `chalice package` writes it; the merge template points the event
# source at the stack's own queue (deploy/build_template.py).
NOTIFY_QUEUE = "mcp-quota-notifications"


@notifications.on_sqs_message(queue=NOTIFY_QUEUE, batch_size=10, name="notifier")
def notifier(event: SQSEvent) -> dict[str, Any]:
    """Publish queued emails to SNS; SQS delivers the failed ones again, then keeps them
    in the dead-letter queue (partial batch answer: the sent ones are not repeated)."""
    messages = ((record.to_dict()["messageId"], record.body) for record in event)
    delivered = notify.deliver(messages, deps().sns_notifier)
    for category in delivered.failed_categories:
        count("NotificationFailed", category or None)
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in delivered.failed]}
