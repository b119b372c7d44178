"""A lease's unspent calls, given back by the client that held it."""

from __future__ import annotations

from chalicelib.check.requests import LeaseReturn
from chalicelib.check.steps import WiderBudgets
from chalicelib.quota.core import SessionKey
from chalicelib.quota.policy import Policy
from chalicelib.storage.ports import SessionChecks


def return_lease(
    policy: Policy,
    store: SessionChecks,
    wider: WiderBudgets | None,
    tenant: str,
    request: LeaseReturn,
    now_ms: int,
    cutoff_ms: int,
) -> int:
    """Give back the calls of a lease that the client did not spend: to the session only
    if it is the category's last lease, exactly as granted, to counters still live (the
    same generation, not idle-expired since `cutoff_ms`), once; then to a wider budget,
    best effort, only in the window that granted it. Returns the calls given back to the
    session (0: nothing applied).

    Raises:
        StorageError: the store failed before the session took the calls back.
    """
    lease = request.lease
    category = policy.categories.get(lease.category)
    if category is None or not category.lease or request.unused < 1:
        return 0
    unused = min(request.unused, lease.granted, category.lease_max)
    session = SessionKey(tenant, request.session_id)
    snapshot = store.return_lease(session, lease, unused, cutoff_ms)
    if snapshot is None:
        return 0
    if wider is not None:
        # The principal the lease was charged to, as its id names it: the session took
        # the calls back only if its grant binds that same principal.
        wider.give_back_lease(session, lease.principal, category, lease, unused, now_ms)
    return unused
