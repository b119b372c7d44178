"""Nothing a client sends can forge a line in the service's structured log."""

from __future__ import annotations

import json
import uuid

import pytest

from chalicelib.observability import LazyLogger

FORGED = '\r\n{"level":"ERROR","message":"forged"}\r\n\x1b[2K\u2028\u2029\x85'


def test_a_logged_client_value_stays_on_its_line_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Defect class: the JSON log kept non-ASCII line breaks (U+2028, U+2029, NEL) and C1
    controls raw, which log readers split a line at. Every one is escaped."""
    logger = LazyLogger(f"log-test-{uuid.uuid4().hex[:8]}")
    logger.warning(f"refused {FORGED}", extra={"path": f"/actions/x{FORGED}"})
    out = capsys.readouterr().out
    assert out.endswith("\n") and len(out.splitlines()) == 1, repr(out)
    assert out.isascii() and out[:-1].isprintable(), repr(out)
    line = json.loads(out)
    assert line["path"] == f"/actions/x{FORGED}"  # escaped, not lost
