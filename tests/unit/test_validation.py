from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chalicelib.check.requests import MAX_BODY_BYTES, parse_check, parse_json_object
from chalicelib.errors import InvalidRequest, PayloadTooLarge
from chalicelib.quota.policy import load_policy

POLICY = load_policy("default.json")


def field_of(body: Any) -> str | None:
    with pytest.raises(InvalidRequest) as info:
        parse_check(body, POLICY)
    return info.value.field


def test_a_minimal_request_parses() -> None:
    request = parse_check({"session_id": "s1", "tool": "delete_tag"}, POLICY)
    assert request.session_id == "s1" and request.read_only_hint is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tool": "t"}, "session_id"),
        ({"session_id": "s"}, "tool"),
        ({"session_id": "", "tool": "t"}, "session_id"),
        ({"session_id": "a b", "tool": "t"}, "session_id"),
        ({"session_id": "s\u00e9", "tool": "t"}, "session_id"),
        ({"session_id": "s\n", "tool": "t"}, "session_id"),
        ({"session_id": "s", "tool": "t\n"}, "tool"),
        ({"session_id": "s" * 257, "tool": "t"}, "session_id"),
        ({"session_id": 5, "tool": "t"}, "session_id"),
        ({"session_id": "s", "tool": "rm -rf"}, "tool"),
        ({"session_id": "s", "tool": "t" * 129}, "tool"),
        ({"session_id": "s", "tool": "t", "category": "admin"}, "category"),
        ({"session_id": "s", "tool": "t", "sesion_id": "x"}, "sesion_id"),
        ({"session_id": "s", "tool": "t", "annotations": []}, "annotations"),
        (
            {"session_id": "s", "tool": "t", "annotations": {"readOnlyHint": "yes"}},
            "annotations.readOnlyHint",
        ),
        (
            {"session_id": "s", "tool": "t", "annotations": {"readonly": True}},
            "annotations.readonly",
        ),
        ({"session_id": "s", "tool": "t", "call_id": ""}, "call_id"),
        ({"session_id": "s", "tool": "t", "principal": "x\ny"}, "principal"),
    ],
)
def test_bad_fields_are_named(body: dict[str, Any], field: str) -> None:
    assert field_of(body) == field


def test_annotations_without_read_only_hint_mean_write() -> None:
    body = {"session_id": "s", "tool": "t", "annotations": {"destructiveHint": False}}
    assert parse_check(body, POLICY).read_only_hint is False


@pytest.mark.parametrize("raw", [b"", b"{", b"[1]", b'"s"', b"\xff\xfe"])
def test_bodies_that_are_not_one_json_object(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_json_object(raw)
    assert info.value.field == "body"


def test_oversized_body() -> None:
    with pytest.raises(PayloadTooLarge):
        parse_json_object(b" " * (MAX_BODY_BYTES + 1))


@given(st.dictionaries(st.text(max_size=12), st.none() | st.text() | st.integers(), max_size=6))
def test_any_object_either_parses_or_fails_with_a_named_field(body: dict[str, Any]) -> None:
    try:
        request = parse_check(body, POLICY)
    except InvalidRequest as exc:
        assert exc.field is not None and exc.message
    else:
        assert 1 <= len(request.session_id) <= 256 and 1 <= len(request.tool) <= 128


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_invalid_request(raw: bytes) -> None:
    try:
        parse_json_object(raw)
    except InvalidRequest:
        pass
    else:
        assert isinstance(json.loads(raw), dict)
