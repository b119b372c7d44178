"""Notifications to administrators: SNS (email subscriptions in production), reached
through a queue in a deployed stack.

A refusing request only enqueues (`QueuedNotifier`: one SQS call inside the store budget);
the notifier function publishes to SNS (`deliver`), and a message it cannot publish is
retried by SQS, then kept in the dead-letter queue, which is alarmed on. `make run` has
no queue: there the request publishes to SNS itself (`Notifier`), as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient
else:
    SNSClient = Any  # the stubs are a development dependency

MAX_SUBJECT = 99  # SNS: "less than 100 characters"
C = TypeVar("C")


@dataclass(frozen=True)
class Notification:
    """One message: an email subject, a plain-text body and filterable attributes."""

    subject: str
    body: str
    attributes: dict[str, str]


def clean_subject(text: str) -> str:
    """SNS email subjects: under 100 characters, no line breaks or control characters."""
    flat = "".join(ch if ch.isprintable() else " " for ch in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= MAX_SUBJECT else flat[: MAX_SUBJECT - 1] + "…"


def _describe(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", "ClientError"))
    return type(exc).__name__


class NotificationFailed(Exception):
    """Publishing (or enqueueing) failed after the retry."""


class MalformedNotification(Exception):
    """A queued message is not a notification this code wrote."""


class Publisher(Protocol):
    """Sends one notification on its way; the port `alerts.DecisionReporter` uses."""

    @property
    def enabled(self) -> bool:
        """Whether notifications can be sent at all."""
        ...

    def publish(self, note: Notification) -> str:
        """Send it; returns a message id.

        Raises:
            NotificationFailed: it could not be sent.
        """
        ...


class QueueClient(Protocol):
    """The one SQS call the API handler makes."""

    def send_message(self, *, QueueUrl: str, MessageBody: str) -> Mapping[str, Any]: ...


def encode(note: Notification) -> str:
    """A notification as a queue message body."""
    fields = {"subject": note.subject, "body": note.body, "attributes": note.attributes}
    return json.dumps(fields, separators=(",", ":"))


def decode(raw: str) -> Notification:
    """The notification `encode` wrote.

    Raises:
        MalformedNotification: the body is not one.
    """
    try:
        fields = json.loads(raw)
        subject, body, attributes = fields["subject"], fields["body"], fields["attributes"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise MalformedNotification("not a queued notification") from exc
    if not (isinstance(subject, str) and isinstance(body, str) and isinstance(attributes, dict)):
        raise MalformedNotification("not a queued notification")
    return Notification(subject, body, {str(k): str(v) for k, v in attributes.items()})


PUBLISH_TRIES = 2
# One publish at worst: PUBLISH_TRIES tries, each botocore's 2 attempts of 0.5 s connect
# + 1 s read with up to 1 s of backoff between (chalicelib/wiring.py, CLIENT_CONFIG).
# The notifier starts a publish only with this much of its invocation left.
PUBLISH_WORST_MS = 8_000


@dataclass(eq=False)
class _Sender(Generic[C]):
    """What both senders hold: the client, built on first use (most checks never
    notify); where they send (none configured: ""); whether they echo to the console."""

    client: Callable[[], C]
    target: str
    echo: bool = False

    @property
    def enabled(self) -> bool:
        """Whether a destination is configured."""
        return bool(self.target)

    def _show(self, how: str, note: Notification) -> None:
        if self.echo:
            print(f"\n=== notification ({how}) ===\nSubject: {note.subject}\n\n{note.body}\n")


class Notifier(_Sender[SNSClient]):
    """Publishes to one topic (the target: its ARN); retries once; optionally echoes to the
    console (local)."""

    def publish(self, note: Notification) -> str:
        """Publish; returns the SNS message id.

        Raises:
            NotificationFailed: no topic is configured, or both tries failed.
        """
        self._show("email", note)
        if not self.enabled:
            raise NotificationFailed("no notification topic is configured (QUOTA_TOPIC_ARN)")
        attributes = {
            name: {"DataType": "String", "StringValue": value}
            for name, value in note.attributes.items()
        }
        last: Exception | None = None
        for _ in range(PUBLISH_TRIES):
            try:
                response = self.client().publish(
                    TopicArn=self.target,
                    Subject=clean_subject(note.subject),
                    Message=note.body,
                    MessageAttributes=attributes,  # type: ignore[arg-type]
                )
                return str(response["MessageId"])
            except (ClientError, BotoCoreError) as exc:
                last = exc
        assert last is not None
        raise NotificationFailed(f"SNS publish failed: {_describe(last)}") from last


class QueuedNotifier(_Sender[QueueClient]):
    """Enqueues notifications for the notifier function (the target: the queue's URL): a
    refusal never waits on SNS."""

    def publish(self, note: Notification) -> str:
        """Enqueue; returns the SQS message id (botocore retries once, CLIENT_CONFIG).

        Raises:
            NotificationFailed: no queue is configured, or SQS refused or did not answer.
        """
        self._show("queued", note)
        if not self.enabled:
            raise NotificationFailed("no notification queue is configured")
        try:
            response = self.client().send_message(QueueUrl=self.target, MessageBody=encode(note))
        except (ClientError, BotoCoreError) as exc:
            raise NotificationFailed(f"SQS send failed: {_describe(exc)}") from exc
        return str(response["MessageId"])


@dataclass(frozen=True)
class Delivered:
    """What the notifier function did with one batch."""

    sent: list[str]
    failed: list[str]  # message ids SQS should deliver again (then dead-letter)
    failed_categories: list[str]
    deferred: list[str] = field(default_factory=list)  # not tried: too little time left

    @property
    def again(self) -> list[str]:
        """The message ids SQS should deliver again: the failed and the deferred."""
        return [*self.failed, *self.deferred]


def deliver(
    messages: Iterable[tuple[str, str]],
    notifier: Publisher,
    time_left_ms: Callable[[], int] | None = None,
) -> Delivered:
    """Publish each queued (message id, body) to SNS; never raises, so one bad message
    cannot fail (and repeat) the batch's good ones, and never starts a publish that could
    outlast the invocation (`time_left_ms`), so a timeout never makes SQS resend the
    batch's sent ones: those not tried are deferred."""
    sent: list[str] = []
    failed: list[str] = []
    categories: list[str] = []
    deferred: list[str] = []
    for message_id, raw in messages:
        if deferred or (time_left_ms is not None and time_left_ms() < PUBLISH_WORST_MS):
            deferred.append(message_id)
            continue
        try:
            note = decode(raw)
        except MalformedNotification:
            failed.append(message_id)  # to the dead-letter queue, after the retries
            categories.append("")
            continue
        try:
            notifier.publish(note)
        except NotificationFailed:
            failed.append(message_id)
            categories.append(note.attributes.get("category", ""))
        else:
            sent.append(message_id)
    return Delivered(sent, failed, categories, deferred)
