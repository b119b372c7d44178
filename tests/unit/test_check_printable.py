"""The service's rule for stored free text: no control characters, surrogates or bidi
controls; everything else a person can type passes."""

from __future__ import annotations

import pytest

from chalicelib.check.requests import check_printable
from chalicelib.errors import InvalidRequest


@pytest.mark.parametrize(
    "value",
    ["\x1b]0;pwned\x07", "\x1b[2J", "a\rb", "\x9b", "\x7f", "\x00", "tab\t", "\ud800", "\u202e"],
)
def test_control_characters_are_refused_naming_the_field(value: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_printable(value, "reason")

    assert info.value.field == "reason"


@pytest.mark.parametrize("value", ["migration approved", "café ☕", "日本語", "👩‍💻 deploy", ""])
def test_ordinary_text_passes_unchanged(value: str) -> None:
    assert check_printable(value, "reason") == value
