"""The console's Audit filter offers exactly the service's event types."""

from __future__ import annotations

import re

from chalicelib.console_files import console_file
from chalicelib.quota.events import EventType


def test_the_audit_type_filter_lists_every_event_type() -> None:
    found = console_file("console.js")
    assert found is not None
    script = found[0] if isinstance(found[0], str) else found[0].decode()
    listed = re.search(r"const EVENT_TYPES = \[(.*?)\];", script, re.S)
    assert listed is not None
    assert sorted(re.findall(r'"([a-z_]+)"', listed.group(1))) == sorted(map(str, EventType))
