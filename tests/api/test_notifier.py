"""Refusals' emails off the request path: the refusing request enqueues, the notifier
function publishes, and what it cannot publish goes back to SQS (then dead letters)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError

from chalicelib.api.notifier import BATCH_SIZE, notifier
from chalicelib.notify import (
    PUBLISH_TRIES,
    PUBLISH_WORST_MS,
    Notification,
    NotificationFailed,
    QueuedNotifier,
    deliver,
    encode,
)
from deploy.build_template import load_config
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


class SlowPublisher:
    """Each publish takes the worst a publish can take, on the invocation's clock."""

    enabled = True

    def __init__(self, remaining: list[int]) -> None:
        self.remaining = remaining
        self.sent: list[str] = []

    def publish(self, note: Notification) -> str:
        self.remaining[0] -= PUBLISH_WORST_MS
        self.sent.append(note.subject)
        return note.subject


def test_a_batch_never_outlasts_its_invocation_nor_resends_what_it_sent() -> None:
    """Defect class: a batch that can pass the function's timeout, after which SQS
    delivers every message again, the mails already sent included."""
    remaining = [30_000]  # the notifier's timeout, as Lambda counts it down
    publisher = SlowPublisher(remaining)
    batch = [(f"m{i}", encode(note(f"n{i}"))) for i in range(10)]
    delivered = deliver(batch, publisher, lambda: remaining[0])
    assert remaining[0] >= 0  # never past the timeout
    assert delivered.sent == ["m0", "m1", "m2"] == [f"m{i}" for i in range(len(publisher.sent))]
    assert delivered.deferred == [f"m{i}" for i in range(3, 10)]
    assert delivered.again == delivered.deferred  # only the unsent go back to SQS
    assert delivered.failed_categories == []  # deferring is not a notification failure


def test_the_notifier_defers_through_the_lambda_context(queued_api: Api) -> None:
    class Context:
        def get_remaining_time_in_millis(self) -> int:
            return PUBLISH_WORST_MS - 1

    messages = [{"MessageId": "m1", "ReceiptHandle": "r1", "Body": encode(note("late"))}]
    answer = notifier(sqs_event(messages), Context())
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m1"}]}
    assert queued_api.sent() == []


def test_the_batch_fits_the_timeout_at_the_worst_publish() -> None:
    from chalicelib import aws  # noqa: PLC0415

    one_try = aws.STORE_ATTEMPTS * (aws.STORE_CONNECT_SECONDS + aws.STORE_READ_SECONDS)
    assert PUBLISH_TRIES * (one_try + 1) * 1000 <= PUBLISH_WORST_MS  # + backoff
    timeout = load_config()["stages"]["prod"]["lambda_functions"]["notifier"]["lambda_timeout"]
    assert timeout * 1000 > BATCH_SIZE * PUBLISH_WORST_MS
