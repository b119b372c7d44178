"""Sustained mixed load over HTTP on dynalite: nothing lost, nothing double counted.

The service runs as `make run` runs it, on dynalite (atomic per item like DynamoDB). 16
threads send reads and writes for 20 sessions, bounded in count and in time; afterwards
every session's counters, read back through the admin API, equal the allowed answers.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.e2e.http import ADMIN_TOKEN, call
from tests.support import running_service

THREADS = 16
SESSIONS = 20
REQUESTS = 640  # 32 per session: past the write limit (15) for most, under reads (200)
DEADLINE_SECONDS = 20.0
# dynalite has no SNS; an explicit topic stops serve_local.py from creating one there.
NO_TOPIC = "arn:aws:sns:us-east-1:000000000000:mcp-quota-load-none"

pytestmark = [pytest.mark.dynalite, pytest.mark.e2e]


@pytest.fixture(scope="module")
def url(dynalite_endpoint: str) -> Iterator[str]:
    env = {"AWS_ENDPOINT_URL": dynalite_endpoint, "QUOTA_TOPIC_ARN": NO_TOPIC}
    with running_service(env) as base:
        yield base


def test_every_allowed_answer_is_counted_exactly_once(url: str) -> None:
    run = uuid.uuid4().hex[:8]
    sessions = [f"load-{run}-{i}" for i in range(SESSIONS)]
    tools = {"read": ["search_articles", "get_article"], "write": ["delete_tag"]}
    allowed: Counter[tuple[str, str]] = Counter()
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    deadline = time.monotonic() + DEADLINE_SECONDS
    plan = random.Random(6)
    work = [(plan.choice(sessions), plan.choice(["read", "write"])) for _ in range(REQUESTS)]

    # One keep-alive connection per thread, opened one after another before the load:
    # chalice local's listen backlog is 5, and a reset connect would leave it unknown
    # whether a check was counted.
    host, port = url.removeprefix("http://").split(":")
    connections = [http.client.HTTPConnection(host, int(port), timeout=60) for _ in range(THREADS)]
    for connection in connections:
        connection.connect()
    headers = {"Authorization": "Bearer dev-server-token", "Content-Type": "application/json"}

    def worker(t: int) -> None:
        connection = connections[t]
        for session, category in work[t::THREADS]:
            if time.monotonic() > deadline:
                return
            tool = random.choice(tools[category])
            payload = json.dumps({"session_id": session, "tool": tool})
            connection.request("POST", "/v1/check", payload, headers)
            response = connection.getresponse()
            answer = json.loads(response.read())
            with lock:
                statuses[response.status] += 1
                if response.status == 200:
                    assert answer["category"] == category
                    allowed[(session, category)] += 1

    try:
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(worker, range(THREADS)))
    finally:
        for connection in connections:
            connection.close()

    assert set(statuses) <= {200, 429}, statuses
    assert statuses[200] > 0 and statuses[429] > 0  # the limit was reached under load
    for session in sessions:
        view = call(f"{url}/v1/sessions/{session}", token=ADMIN_TOKEN)
        if view.status == 404:
            assert allowed[(session, "read")] == allowed[(session, "write")] == 0
            continue
        categories = view.body["categories"]
        for category in ("read", "write"):
            assert categories[category]["used"] == allowed[(session, category)], session
        assert categories["write"]["used"] <= 15
