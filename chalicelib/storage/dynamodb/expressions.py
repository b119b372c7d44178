"""The session item's UpdateExpressions (and the few conditions that are not admission
rules: the lists' shape, a trim), as module-level constants built from named parts.
Admission conditions come from `quota.rules`, rendered by `conditions`."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

from chalicelib.storage.dynamodb.layout import (
    CALL_IDS,
    CALLS,
    COUNT_PREFIX,
    EXPIRES,
    GRANT_PREFIX,
    LAST_SEEN,
    LEASED_PREFIX,
    NOTIFIED_PREFIX,
    PK,
    RAISED_PREFIX,
    RAISED_UNTIL_PREFIX,
    REFUSED_PREFIX,
    STARTED,
    SUSPENDED,
)

BASE_NAMES = {
    "#pk": PK,
    "#ls": LAST_SEEN,
    "#started": STARTED,
    "#exp": EXPIRES,
    "#calls": CALLS,
    "#ids": CALL_IDS,
    "#sus": SUSPENDED,
}

# Parts of the conditions that are not the check's admission rule (that one is rendered
# from `quota.rules` by `conditions`): the idle clock, suspension, existence.
_NEW_SESSION = "attribute_not_exists(#pk)"
EXISTS = "attribute_exists(#pk)"
_ACTIVE = "#ls >= :cutoff"
_NOT_SUSPENDED = "attribute_not_exists(#sus)"
_IS_SUSPENDED = "attribute_exists(#sus)"
# A lease counts several calls at once: its calls are counted together, and its grant
# kept, so that a return can be checked against it.
ADD_LEASED = " ADD #l :units"
SET_GRANT = ", #g = :grant"
# The loop breaker counts the call under its key (tool, digest prefix, window) in the
# same write that counts it.
ADD_REPEAT = " ADD #q :one"
ADD_REPEAT_TOO = ", #q :one"

_TOUCH = "#ls = :now, #exp = :exp"
APPEND_CALL = (
    "#calls = list_append(if_not_exists(#calls, :empty), :rec), "
    "#ids = list_append(if_not_exists(#ids, :empty), :cidl)"
)
# Once the list is full: the whole list, shifted by one, if its tail is the one we know.
REWRITE_CALLS = "#calls = :calls, #ids = :ids"
SAME_TAIL = "size(#ids) = :len AND #ids[{last}] = :tail"
_COUNT = "#n = if_not_exists(#n, :zero) + :units, #started = if_not_exists(#started, :now)"
CONSUME_UPDATE = f"SET {_COUNT}, {_TOUCH}, {APPEND_CALL}"
CONSUME_UPDATE_WITH_PRINCIPAL = f"{CONSUME_UPDATE}, #pr = :pr"
CONSUME_SERVER = ", #srv = :srv"
CONSUME_CLIENT = ", #cli = :cli"

# The check path's conditions are the core's rules (`quota.rules`), rendered by
# `conditions`; what follows is what each write changes.

# After idle expiry the counters start again, exactly as if TTL had deleted the item. A
# suspended session's first attempt after idle expiry: its counters start again with the
# refusal as their first record; it stays suspended, and keeps no TTL.
RESTART_SUSPENDED_SET = "SET #started = :now, #ls = :now, #calls = :rec, #ids = :cidl"
_RESET_SET = "#n = :units, #started = :now, #ls = :now, #exp = :exp, #calls = :rec, #ids = :cidl"

# A refused attempt still refreshes the idle clock and is recorded. z_<cat> names the
# refusal that first met the current limit ("<limit>|<check id>"): only the writer whose
# condition finds another limit there sets it (`rules.refusal_noted`), so exactly one
# writer learns that the exhaustion is new, and a retry of that very write can tell it
# was the one.
BLOCK_AGAIN_UPDATE = f"SET {_TOUCH}, {APPEND_CALL} ADD #b :one"
BLOCK_FIRST_UPDATE = f"SET {_TOUCH}, {APPEND_CALL}, #z = :first ADD #b :one"
# A suspended item has no TTL (it must outlive any idle timeout), so none is set here.
BLOCK_UPDATE_SUSPENDED = f"SET #ls = :now, {APPEND_CALL}"
# A replayed call id (a client's retry) is recorded too, and refreshes the idle clock.
REPLAY_UPDATE = f"SET {_TOUCH}, {APPEND_CALL}"

TRIM_CONDITION = "size(#calls) >= :min AND size(#ids) >= :min"
# Taking back a counted call that a wider budget refused; after a reset there is nothing
# to take back from the count, and the call still shows as refused.
UNCOUNT_UPDATE = f"SET #n = #n - :units, {APPEND_CALL}"
UNCOUNT_LEASED = " ADD #l :minus REMOVE #g"
UNCOUNT_RECORD_ONLY = f"SET {APPEND_CALL}"
# Unspent calls of a lease come back once: the grant (`#g`) goes.
RETURN_UPDATE = "SET #n = #n - :unused, #l = #l - :unused REMOVE #g"

# Administrator actions. None of them compares the idle clock or the counters, which
# every check rewrites: a session that agents keep calling can always be acted on.
# A raise may only lift a limit, so concurrent raises never lower one; on an idle
# session it starts the counters again, as the next check would.
RAISE_ACTIVE_UPDATE = "SET #r = :new"
LOWER_UPDATE = "REMOVE #r, #rx"
_START = "#started = :now, #ls = :now, #exp = :exp"
RAISE_FRESH_SET = f"SET #r = :new, {_START}"
RAISE_FRESH_SUSPENDED_SET = "SET #r = :new, #started = :now, #ls = :now"
SUSPEND_UPDATE = (
    "SET #sus = :why, #ls = if_not_exists(#ls, :now), #started = if_not_exists(#started, :now)"
    " REMOVE #exp"
)
# Resuming leaves the idle clock where the last attempt left it, so counters that went
# idle while suspended start again at the next check. The TTL is only clean-up: it is set
# from now, which is never earlier than the idle clock says.
RESUME_UPDATE = "SET #exp = :exp REMOVE #sus"
# `started` names the counters' generation (block records are tied to it), so a reset
# must move it forward; a suspended session keeps no TTL.
RESET_COUNTERS_SET = f"SET {_START}"
RESET_SUSPENDED_SET = "SET #started = :now, #ls = :now"
ADMIN_ROUNDS = 4


def remove_clause(removed: list[str]) -> tuple[str, dict[str, str]]:
    """` REMOVE #x0, #x1...` and its names, for a list of attribute names."""
    if not removed:
        return "", {}
    names = {f"#x{i}": name for i, name in enumerate(removed)}
    return " REMOVE " + ", ".join(names), names


def counter_names(prefixes: Iterable[str], categories: Iterable[str]) -> list[str]:
    return [prefix + c for prefix in prefixes for c in categories]


@lru_cache(maxsize=64)
def reset_expression(
    category: str, all_categories: tuple[str, ...], leased: bool = False
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """SET/REMOVE for an idle reset, and its extra names: clears every other counter."""
    removed = [COUNT_PREFIX + c for c in all_categories if c != category]
    removed += [LEASED_PREFIX + c for c in all_categories if c != category or not leased]
    removed += [GRANT_PREFIX + c for c in all_categories if c != category or not leased]
    removed += counter_names(
        (RAISED_PREFIX, RAISED_UNTIL_PREFIX, NOTIFIED_PREFIX, REFUSED_PREFIX), all_categories
    )
    clause, names = remove_clause(removed)
    leased_set = ", #l = :units, #g = :grant" if leased else ""
    return f"SET {_RESET_SET}{leased_set}{clause}", tuple(names.items())


def with_expiry(update: str, expires: bool) -> str:
    """A raise's update, setting when it lapses or removing a previous expiry. The REMOVE
    of the idle-start form comes last, so the expiry joins the SET or the REMOVE."""
    if expires:
        return update.replace("SET #r = :new", "SET #r = :new, #rx = :until", 1)
    if " REMOVE " in update:
        return update.replace(" REMOVE ", " REMOVE #rx, ", 1)
    return f"{update} REMOVE #rx"
