"""The single use of emailed action links, on the counters table: one small item per used
link, taken with a conditional UpdateItem. Its TTL is clean-up only: a link's expiry is
signed into the link itself and checked before the store is asked.

Item: pk "<tenant> email-link <link id>" (a space, which no session id holds, and no
budget scope is named so), used_at, did, expires_at (TTL), released (the action failed:
the link may be used again).
"""

from __future__ import annotations

from typing import Any

from chalicelib.storage.dynamodb import updates
from chalicelib.storage.dynamodb.updates import ConditionFailed, Table, n, s
from chalicelib.storage.ports import LinkUse

_NAMES = {"#pk": "pk", "#at": "used_at", "#did": "did", "#exp": "expires_at", "#free": "released"}
_UNUSED = "attribute_not_exists(#pk) OR attribute_exists(#free)"
CLAIM_UPDATE = "SET #at = :at, #did = :did, #exp = :exp REMOVE #free"
RELEASE_UPDATE = "SET #free = :yes"
RELEASE_CONDITION = "attribute_exists(#pk)"
KEEP_AFTER_EXPIRY_S = 86_400  # the 410 page can still say when it was used


def _key(tenant: str, link_id: str) -> dict[str, Any]:
    return {"pk": s(f"{tenant} email-link {link_id}")}


def _use(tenant: str, link_id: str, item: dict[str, Any]) -> LinkUse:
    return LinkUse(
        tenant=tenant,
        link_id=link_id,
        used_at_ms=int(item["used_at"]["N"]),
        did=item["did"]["S"],
        expires_ms=(int(item["expires_at"]["N"]) - KEEP_AFTER_EXPIRY_S) * 1000,
    )


class LinkUseStore(Table):
    """Claims and releases action links."""

    def claim(self, use: LinkUse) -> LinkUse | None:
        """Take the link: None if it is now ours, else the use that took it first.

        Raises:
            StorageError: the store failed.
        """
        doing = "using an action link"
        values = {
            ":at": n(use.used_at_ms),
            ":did": s(use.did),
            ":exp": n(use.expires_ms // 1000 + KEEP_AFTER_EXPIRY_S),
        }
        key = _key(use.tenant, use.link_id)
        try:
            updates.update(
                self._client,
                self._table,
                key,
                CLAIM_UPDATE,
                _UNUSED,
                _NAMES,
                values,
                doing,
                returns="NONE",
                old_on_failure=True,
            )
        except ConditionFailed as failed:
            old = failed.old_item or self._read(use.tenant, use.link_id, doing)
            if not old:  # released and gone meanwhile: a rare race, try once more
                return self.claim(use)
            return _use(use.tenant, use.link_id, dict(old))
        return None

    def _read(self, tenant: str, link_id: str, doing: str) -> dict[str, Any] | None:
        return updates.get(self._client, self._table, _key(tenant, link_id), doing)

    def find(self, tenant: str, link_id: str) -> LinkUse | None:
        """The use that took the link, if any (a released link counts as unused).

        Raises:
            StorageError: the store failed.
        """
        item = self._read(tenant, link_id, "reading an action link")
        if item is None or "released" in item:
            return None
        return _use(tenant, link_id, item)

    def release(self, tenant: str, link_id: str) -> None:
        """Give a link back after its action failed.

        Raises:
            StorageError: the store failed.
        """
        try:
            updates.update(
                self._client,
                self._table,
                _key(tenant, link_id),
                RELEASE_UPDATE,
                RELEASE_CONDITION,
                {"#pk": "pk", "#free": "released"},
                {":yes": {"BOOL": True}},
                "releasing an action link",
                returns="NONE",
            )
        except ConditionFailed:
            return
