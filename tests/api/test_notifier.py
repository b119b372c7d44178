"""Refusals' emails off the request path: the refusing request enqueues, the notifier
function publishes, and what it cannot publish goes back to SQS (then dead letters)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError

from chalicelib.api.notifier import notifier
from chalicelib.notify import Notification, NotificationFailed, QueuedNotifier, deliver, encode
from tests.api.conftest import Api, running_api
from tests.support import FixedClock

DELETE = {"session_id": "cleanup-7", "tool": "delete_tag", "principal": "tag-bot"}


@pytest.fixture
def queued_api(clock: FixedClock) -> Iterator[Api]:
    """The API as deployed: a notification queue is configured (moto's SQS)."""
    with running_api(clock, "memory", notify_queue_url="pending") as api:
        url = boto3.client("sqs").create_queue(QueueName="notifications")["QueueUrl"]
        # Settings are frozen: the container reads the URL when it first builds the notifier.
        object.__setattr__(api.container.settings, "notify_queue_url", url)
        yield api


def queued(api: Api) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs")
    url = api.container.settings.notify_queue_url
    messages: list[dict[str, Any]] = []
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return messages
        messages += batch


def sqs_event(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "eventSource": "aws:sqs",
            }
            for m in messages
        ]
    }


def test_a_refusal_enqueues_and_the_notifier_sends_the_email(queued_api: Api) -> None:
    api = queued_api
    answers = [api.check(**DELETE) for _ in range(16)]
    assert [a.status_code for a in answers].count(429) == 1
    assert api.sent() == []  # nothing published by the refusing request

    messages = queued(api)
    assert len(messages) == 1
    answer = notifier(sqs_event(messages), None)

    assert answer == {"batchItemFailures": []}
    [(_, body, subject, attributes, _)] = api.sent()
    assert subject is not None and "cleanup-7" in subject
    assert "delete_tag" in body
    assert attributes is not None and attributes["category"]["Value"] == "write"


def test_what_cannot_be_published_is_given_back_to_sqs_alone(queued_api: Api) -> None:
    api = queued_api
    good = {"MessageId": "m-good", "ReceiptHandle": "r1", "Body": encode(note("fine"))}
    bad = {"MessageId": "m-bad", "ReceiptHandle": "r2", "Body": "not a notification"}

    answer = notifier(sqs_event([bad, good]), None)

    assert answer == {"batchItemFailures": [{"itemIdentifier": "m-bad"}]}
    assert [subject for _, _, subject, _, _ in api.sent()] == ["fine"]


def note(subject: str) -> Notification:
    return Notification(subject, "body", {"category": "write"})


class RefusingPublisher:
    enabled = True

    def __init__(self) -> None:
        self.tried: list[str] = []

    def publish(self, note: Notification) -> str:
        self.tried.append(note.subject)
        raise NotificationFailed("SNS publish failed: Throttling")


def test_a_failed_publish_is_retried_by_sqs_and_counted_per_category() -> None:
    publisher = RefusingPublisher()
    delivered = deliver([("m1", encode(note("a"))), ("m2", encode(note("b")))], publisher)
    assert delivered.failed == ["m1", "m2"]
    assert delivered.failed_categories == ["write", "write"]
    assert delivered.sent == []
    assert publisher.tried == ["a", "b"]


def test_an_unreachable_queue_is_a_notification_failure() -> None:
    class Down:
        def send_message(self, *, QueueUrl: str, MessageBody: str) -> dict[str, Any]:
            raise EndpointConnectionError(endpoint_url=QueueUrl)

    with pytest.raises(NotificationFailed, match="SQS send failed"):
        QueuedNotifier(Down, "https://sqs.invalid/q").publish(note("x"))
    with pytest.raises(NotificationFailed, match="no notification queue"):
        QueuedNotifier(Down, "").publish(note("x"))
