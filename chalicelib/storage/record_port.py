"""The narrow port a backend implements for each kind of record (a session, a budget):
read a record, and apply one change (`quota.changes`) under one condition (`quota.rules`),
handing back the record the condition failed on. Which rule and change a write uses, and
what a failed condition means, is decided once above it (`storage.sessions`,
`storage.budgets`); a new backend is a codec and these two operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from chalicelib.storage.errors import RecordNotFound

if TYPE_CHECKING:
    from chalicelib.quota.changes import Change
    from chalicelib.quota.facts import Condition

K_contra = TypeVar("K_contra", contravariant=True)
R = TypeVar("R")


@dataclass(frozen=True)
class Applied(Generic[R]):
    """The change was applied: the record after it, or, for a write that asked for the
    record before it (`before`), that one (None: there was none)."""

    record: R | None


@dataclass(frozen=True)
class Failed(Generic[R]):
    """The condition failed, and nothing was written: the record it failed on (None:
    there is none)."""

    old: R | None


class RecordStore(Protocol[K_contra, R]):
    """One kind of record, keyed by a domain value, in one backend."""

    def read(self, key: K_contra) -> R | None:
        """The record as stored (strongly consistent), or None.

        Raises:
            StorageError: the store failed.
        """

    def write(
        self,
        key: K_contra,
        change: Change,
        rule: Condition | None,
        doing: str,
        before: bool = False,
    ) -> Applied[R] | Failed[R]:
        """Apply `change` (creating the record if absent) if `rule` holds on the record as
        stored (no rule: always), atomically; `doing` names the write in errors. The
        store may say a rule more strictly than it is (it then fails where the rule holds,
        and the caller reads the old record and tries again), never more loosely.

        Raises:
            StorageError: the store failed.
        """


def after(out: Applied[R]) -> R:
    """The record an applied write left (one that did not ask for the record before)."""
    assert out.record is not None, "a write answers the record it left"
    return out.record


def found(out: Applied[R] | Failed[R], doing: str) -> R:
    """The record a write on a record that must exist left.

    Raises:
        RecordNotFound: the write's condition failed: there is no such record.
    """
    if isinstance(out, Failed):
        raise RecordNotFound(doing)
    return after(out)
