"""The approvers' email (issue 32): the agent's text cannot hide or reorder what the
approver reads."""

from __future__ import annotations

from chalicelib.check.approval_email import approval_notification
from chalicelib.quota.approvals import Approval, ApprovalKey, ApprovalState


def test_the_arguments_are_shown_without_control_or_bidi_characters() -> None:
    """Defect class: a Trojan-Source style preview that reads as other arguments."""
    key = ApprovalKey("acme", "bot\u202e1", "drop_table", "a" * 64)
    hostile = 'users"}\u202e\r\x1b[2J{"table": "audit'
    approval = Approval("ap_1", key, ApprovalState.PENDING, 0, 900_000, "s1", "db", hostile)
    note = approval_notification(approval, "https://q.example/console#/approvals/ap_1")
    assert all(c.isprintable() or c == "\n" for c in note.body)
    assert "\\u202e" in note.body and "https://q.example/console#/approvals/ap_1" in note.body
    assert "\n" not in note.subject and len(note.subject) < 100
