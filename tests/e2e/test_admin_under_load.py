"""Issue 10, item 1, over HTTP: every admin action succeeds at the first try while 32
agents keep calling the same session (refused calls used to rewrite the clock that a
resume's condition compared, so it failed with "kept changing")."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.e2e.http import ADMIN_TOKEN, call
from tests.support import running_service

AGENTS = 32
ACTIONS = [
    ("suspend", {"reason": "runaway loop"}),
    ("raise", {"category": "write", "add": 1, "reason": "let it finish"}),
    ("resume", {"reason": "fixed"}),
    ("reset", {"reason": "start over"}),
]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with running_service() as base:
        yield base


def test_every_admin_action_succeeds_while_32_agents_hammer_the_session(url: str) -> None:
    session = "hammered"
    for _ in range(16):
        call(f"{url}/v1/check", "POST", {"session_id": session, "tool": "delete_tag"})
    stop = threading.Event()
    statuses: list[int] = []

    def agent() -> None:
        while not stop.is_set():
            body = {"session_id": session, "tool": "delete_tag"}
            statuses.append(call(f"{url}/v1/check", "POST", body).status)

    agents = [threading.Thread(target=agent) for _ in range(AGENTS)]
    for thread in agents:
        thread.start()
    try:
        for _ in range(2):
            for action, body in ACTIONS:
                path = f"{url}/v1/sessions/{session}/{action}"
                reply = call(path, "POST", body, token=ADMIN_TOKEN)
                assert reply.status == 200, (action, reply.body)
    finally:
        stop.set()
        for thread in agents:
            thread.join()
    assert statuses and set(statuses) <= {200, 429}
