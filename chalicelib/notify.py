"""SNS notifications to administrators (email subscriptions in production)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_sns import SNSClient

MAX_SUBJECT = 99  # SNS: "less than 100 characters"


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
    """Publishing failed after the retry."""


class Notifier:
    """Publishes to one topic; retries once; optionally echoes to the console (local)."""

    def __init__(self, client: Callable[[], SNSClient], topic_arn: str, echo: bool = False) -> None:
        self._client = client  # built on first publish: most checks never notify
        self._topic = topic_arn
        self._echo = echo

    @property
    def enabled(self) -> bool:
        """Whether a topic is configured."""
        return bool(self._topic)

    def publish(self, note: Notification) -> str:
        """Publish; returns the SNS message id.

        Raises:
            NotificationFailed: no topic is configured, or both tries failed.
        """
        if self._echo:
            print(f"\n=== notification (email) ===\nSubject: {note.subject}\n\n{note.body}\n")
        if not self.enabled:
            raise NotificationFailed("no notification topic is configured (QUOTA_TOPIC_ARN)")
        attributes = {
            name: {"DataType": "String", "StringValue": value}
            for name, value in note.attributes.items()
        }
        last: Exception | None = None
        for _ in range(2):
            try:
                response = self._client().publish(
                    TopicArn=self._topic,
                    Subject=clean_subject(note.subject),
                    Message=note.body,
                    MessageAttributes=attributes,  # type: ignore[arg-type]
                )
                return str(response["MessageId"])
            except (ClientError, BotoCoreError) as exc:
                last = exc
        assert last is not None
        raise NotificationFailed(f"SNS publish failed: {_describe(last)}") from last
