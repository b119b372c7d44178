"""The service as `make run` starts it, with the administrators' email read from an SQS
queue subscribed to its SNS topic (on the embedded backend)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import boto3

from tests.support import free_port, running_service


@dataclass(frozen=True)
class Stack:
    """The service's URL and the admin inbox."""

    url: str
    queue_url: str
    sqs: Any

    def inbox(self) -> list[dict[str, Any]]:
        """The notifications received since the last call (SNS envelopes)."""
        messages: list[dict[str, Any]] = []
        while True:
            batch = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            received = batch.get("Messages", [])
            if not received:
                return messages
            messages += [json.loads(m["Body"]) for m in received]


@contextmanager
def service_with_inbox(extra_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """Start the service and subscribe an SQS queue to its alerts topic."""
    backend_port = free_port()
    backend = f"http://127.0.0.1:{backend_port}"
    with running_service({"QUOTA_BACKEND_PORT": str(backend_port), **(extra_env or {})}) as url:
        sns = boto3.client("sns", endpoint_url=backend, region_name="us-east-1")
        sqs = boto3.client("sqs", endpoint_url=backend, region_name="us-east-1")
        [topic] = [t["TopicArn"] for t in sns.list_topics()["Topics"]]
        queue_url = sqs.create_queue(QueueName="admin-inbox")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn["Attributes"]["QueueArn"])
        yield Stack(url, queue_url, sqs)
