"""The approvers' email (issue 32): the agent's text cannot hide or reorder what the
approver reads."""

from __future__ import annotations

from chalicelib.check.approval_email import approval_notification
from chalicelib.links.approval_links import ApprovalLinkMaker
from chalicelib.links.signing import LinkAction, LinkPayload, LinkSigner
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


def test_the_links_come_with_their_expiry_and_only_where_links_are_set_up() -> None:
    """The approve and deny links expire with the approval, never past 24 h (the link
    key's rotation promise); without links the email still says where to decide."""
    key = ApprovalKey("acme", "bot", "drop_table", "a" * 64)
    signer = LinkSigner([b"k" * 32])
    maker = ApprovalLinkMaker(signer, "https://q.example")
    short = Approval("ap_1", key, ApprovalState.PENDING, 0, 900_000, "s1", "db", "{}")
    links = maker.links(short)
    note = approval_notification(short, "https://q.example/console#/approvals/ap_1", links)
    assert "expire with the approval at 1970-01-01T00:15:00Z" in note.body
    actions = []
    for link in links:
        assert link.url in note.body
        payload = signer.verify(link.url.rsplit("/", 1)[1], 0)
        assert isinstance(payload, LinkPayload) and payload.approval_id == "ap_1"
        assert payload.expires_ms == 900_000
        actions.append(payload.action)
    assert actions == [LinkAction.APPROVE, LinkAction.DENY]

    day = 24 * 3600 * 1000
    long = Approval("ap_2", key, ApprovalState.PENDING, 0, 3 * day, "s1", "db", "{}")
    assert {link.expires_ms for link in maker.links(long)} == {day}

    bare = approval_notification(short, "https://q.example/console#/approvals/ap_1")
    assert "/actions/" not in bare.body and "One click" not in bare.body
    assert "https://q.example/console#/approvals/ap_1" in bare.body
