"""bench/latency_proxy.py: where requests begin in a client's byte stream."""

from __future__ import annotations

import pytest

from bench.latency_proxy import RequestFramer

HEAD = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n"
REQUEST = HEAD + b"hello"


def test_one_request_in_one_chunk_begins_once() -> None:
    assert RequestFramer().starts(REQUEST) == 1


def test_a_body_in_its_own_chunk_begins_nothing() -> None:
    framer = RequestFramer()
    assert [framer.starts(HEAD), framer.starts(b"hel"), framer.starts(b"lo")] == [1, 0, 0]
    assert framer.starts(REQUEST) == 1


def test_a_head_split_inside_its_terminator_is_one_request() -> None:
    framer = RequestFramer()
    cut = len(HEAD) - 1
    assert [framer.starts(REQUEST[:cut]), framer.starts(REQUEST[cut:])] == [1, 0]
    assert framer.starts(REQUEST) == 1


def test_requests_back_to_back_in_one_chunk_each_begin() -> None:
    assert RequestFramer().starts(REQUEST + REQUEST + HEAD) == 3


def test_a_request_without_a_body_ends_at_its_head() -> None:
    framer = RequestFramer()
    assert framer.starts(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == 1
    assert framer.starts(REQUEST) == 1


def test_chunked_request_bodies_are_refused() -> None:
    with pytest.raises(ValueError, match="chunked"):
        RequestFramer().starts(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
