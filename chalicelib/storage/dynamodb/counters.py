"""Sessions on DynamoDB: the narrow pair (`record_port.RecordStore`), each write one
conditional UpdateItem (the rule rendered by `conditions`, the change by `changes`). What
each write is, and what its failure means, is `storage.sessions`'.

Every entry of `cids` names the check that wrote it, so that botocore's own retry of a
timed-out write fails its condition instead of counting or recording the call twice.

The last calls cost no extra request. Each write returns the item, so the container
remembers each session's lists (`Tails`); once a list holds `keep` entries, or a refusal
repeats the last one, a write sends the whole list, shifted by one (or with the refusal
folded into the last entry, as a count), on condition that its tail is still the one
remembered: a runaway loop neither grows the item nor pushes the other calls out. Only
when the container has not seen the list, or another writer changed it first, does a
write append instead; the list then grows, and is trimmed in batches. The loop breaker's
counts of ended windows, and the lives of call ids gone from the list, go the same way:
a counted call's write drops those the container saw (`Change.tidy_at`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from chalicelib.quota.changes import Calls, Change
from chalicelib.quota.core import SessionKey, SessionSnapshot, ended_repeats
from chalicelib.quota.facts import Condition, Fits, SessionExists, facts
from chalicelib.storage.dynamodb.changes import APPEND_CALL, RESTART_CALLS, REWRITE_CALLS
from chalicelib.storage.dynamodb.codec import (
    encode_call,
    key_of,
    snapshot_from_item,
    stored_id,
    taken_back_id,
)
from chalicelib.storage.dynamodb.conditions import Form, Rendered, raise_form, render
from chalicelib.storage.dynamodb.session_item import SessionItems
from chalicelib.storage.dynamodb.tails import Tail
from chalicelib.storage.dynamodb.updates import ConditionFailed
from chalicelib.storage.dynamodb.updates import s as _s
from chalicelib.storage.record_port import Applied, Failed
from chalicelib.storage.sessions import Sessions

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# The case of the consume rule a known session's write leaves out: a new session. (A
# session deleted meanwhile fails, and is counted as new on the next round.)
KNOWN = frozenset({SessionExists})

Outcome = Applied[SessionSnapshot] | Failed[SessionSnapshot]


class SessionTable(SessionItems):
    """Session items: read one, or apply one change under one condition."""

    def read(self, session: SessionKey) -> SessionSnapshot | None:
        """The session as stored (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """
        key = key_of(session)
        item = self._item(key, "reading a session")
        self._tails.learn(key, item)
        return snapshot_from_item(item) if item else None

    def write(
        self,
        session: SessionKey,
        change: Change,
        rule: Condition | None,
        doing: str,
        before: bool = False,
    ) -> Outcome:
        """The change in one UpdateItem on the rule (a second, tied to the raise as read,
        for a lease under a raise); its record in the list this container knows, shifted
        or folded on condition that no other writer came between, else appended.

        Raises:
            StorageError: the store failed.
        """
        assert not before, "a session's writes answer the session after them"
        key = key_of(session)
        tail = self._tails.get(key)
        form = _form(rule, tail)
        record = change.record
        calls = Calls.KEEP if record is None else change.calls
        if record is not None and tail is not None and calls is not Calls.RESTART:
            if calls is Calls.REPLACE:
                counted = stored_id(replace(record, allowed=True))
                shift = bool(tail.ids) and tail.ids[-1] == counted
                new = tail.replacing_last(encode_call(record), taken_back_id(record))
            else:
                shift = len(tail.ids) >= self._keep or tail.folds(record)
                new = tail.adding(record, self._keep)
            if shift:
                tidy = _tidied(change, tail, new)
                update = self._change(tidy, REWRITE_CALLS, tail.values(new))
                try:
                    item = self._once(key, update, rule, form, doing, tail.condition())
                except ConditionFailed as failed:
                    old = self._old(failed, key, doing)
                    if old is not None and not tail.same_lists(Tail.of(old)):
                        tail = self._tails.get(key)  # another writer came first: append
                        form = _form(rule, tail)
                    elif calls is not Calls.REPLACE:
                        return self._again(key, self._appending(change, tail), rule, form, old)
                else:
                    self._tails.learn(key, item)
                    return Applied(snapshot_from_item(item))
        update = self._appending(change, tail)
        try:
            item = self._once(key, update, rule, form, doing)
        except ConditionFailed as failed:
            return self._again(key, update, rule, form, self._old(failed, key, doing))
        return self._done(key, item, calls)

    def _appending(self, change: Change, tail: Tail | None) -> Rendered:
        """The change with its record appended to the last calls (or starting them)."""
        if change.record is None:
            return self._change(change, None)
        if change.calls is Calls.RESTART:
            return self._change(change, RESTART_CALLS)
        ids = None
        if change.calls is Calls.REPLACE:  # the counted record is read as taken back
            ids = {":cidl": {"L": [_s(taken_back_id(change.record))]}}
        return self._change(_tidied(change, tail, None), APPEND_CALL, ids)

    def _once(
        self,
        key: str,
        update: Rendered,
        rule: Condition | None,
        form: Form,
        doing: str,
        also: str = "",
    ) -> dict[str, Any]:
        """Raises: ConditionFailed, StorageError."""
        rendered = render(rule, form) if rule is not None else Rendered("")
        return self._write(key, update, rendered, doing, old_on_failure=True, also=also)

    def _again(
        self,
        key: str,
        update: Rendered,
        rule: Condition | None,
        form: Form,
        old: Mapping[str, Any] | None,
    ) -> Outcome:
        """After a failed condition: a lease under a raise in force is tried once more,
        tied to that raise (a condition cannot subtract); anything else failed.

        Raises:
            StorageError: the store failed.
        """
        seen = snapshot_from_item(old) if old else None
        tied = raise_form(rule, form, seen) if rule is not None else None
        if tied is None:
            return Failed(seen)
        doing = "counting a lease under a raise"
        try:
            item = self._once(key, update, rule, tied, doing)
        except ConditionFailed as again:
            old = self._old(again, key, doing)
            return Failed(snapshot_from_item(old) if old else None)
        return self._done(key, item, Calls.APPEND)

    def _done(self, key: str, item: Mapping[str, Any], calls: Calls) -> Outcome:
        """The item a write left: its lists learnt (and trimmed, after an append)."""
        if calls in (Calls.APPEND, Calls.REPLACE):
            self._appended(key, item)
        else:
            self._tails.learn(key, item)
        return Applied(snapshot_from_item(item))


def _form(rule: Condition | None, tail: Tail | None) -> Form:
    """How to say a rule on a session this container knows (or not): without the case
    of a new session, and with a raise only where the session has one."""
    if tail is None or rule is None:
        return Form()
    raised = any(isinstance(f, Fits) and f.category in tail.raised for f in facts(rule))
    return Form(KNOWN, raised)


def _tidied(change: Change, tail: Tail | None, new: Tail | None) -> Change:
    """What `change.tidy_at` drops, as the lists this container knows show it (`new`:
    the lists this write leaves, when it writes them whole; None: it appends)."""
    if change.tidy_at is None:
        return change
    ended = ended_repeats(tail.repeats, change.tidy_at) if tail is not None else ()
    return change.tidied(ended, new.gone_lives(change.tidy_at) if new is not None else ())


class CounterStore(Sessions):
    """The session counters port (`storage.sessions`) on DynamoDB items."""

    def __init__(
        self,
        client: DynamoDBClient,
        table_name: str,
        categories: Iterable[str],
        keep_calls: int = 10,
    ) -> None:
        super().__init__(SessionTable(client, table_name, categories, keep_calls))
