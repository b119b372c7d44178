"""The approvals port on the audit table (issue 32): a partition per tenant,
pk "<tenant># approvals" (the space keeps it apart from every session's trail, as the
trouble index does), holding one item per approval (sk "a#<id>") and one pointer per call
(sk "k#<SHA-256 of principal, tool, digest>", `cur` = its newest approval's id).

No attribute of these items is a key of the audit table's indexes (`tenant`,
`*_feed`), so they never show in the audit listings. `expires_at` (TTL) only cleans up:
an approval's expiry is enforced by `ex` inside every condition.
"""

from __future__ import annotations

import hashlib
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.quota.approvals import Approval, ApprovalKey, ApprovalState
from chalicelib.storage.dynamodb.updates import ConditionFailed, Table, all_items, call, conditional
from chalicelib.storage.ports import RecordChanged, RecordNotFound

_NEW = "attribute_not_exists(#pk)"
_STILL = "#st = :expected"
_STILL_LIVE = "#st = :expected AND #ex > :now"
_POINT_NEW = "attribute_not_exists(#cur)"
_POINT_FROM = "attribute_not_exists(#cur) OR #cur = :replacing"
_OF_TENANT = "#pk = :pk AND begins_with(#sk, :approvals)"
_KEEP_SECONDS = 30 * 24 * 3600  # listed this long after expiry, then TTL removes it
_OPTIONAL = {
    "ss": "session_id",
    "sv": "server",
    "pv": "arguments_preview",
    "by": "decided_by",
    "rs": "reason",
}


def _pk(tenant: str) -> str:
    return f"{tenant}# approvals"


def _pointer_sk(key: ApprovalKey) -> str:
    joined = "\x00".join((key.principal, key.tool, key.args_digest))
    return "k#" + hashlib.sha256(joined.encode("utf-8")).hexdigest()


def _item(approval: Approval) -> dict[str, Any]:
    key = approval.key
    item: dict[str, Any] = {
        "pk": {"S": _pk(key.tenant)},
        "sk": {"S": "a#" + approval.approval_id},
        "st": {"S": approval.state.value},
        "tn": {"S": key.tenant},
        "pr": {"S": key.principal},
        "tl": {"S": key.tool},
        "dg": {"S": key.args_digest},
        "cr": {"N": str(approval.created_ms)},
        "ex": {"N": str(approval.expires_ms)},
        "expires_at": {"N": str(approval.expires_ms // 1000 + _KEEP_SECONDS)},
    }
    for attribute, field in _OPTIONAL.items():
        value = getattr(approval, field)
        if value is not None:
            item[attribute] = {"S": value}
    return item


def _approval(item: dict[str, Any]) -> Approval:
    optional = {f: item[a]["S"] for a, f in _OPTIONAL.items() if a in item}
    return Approval(
        approval_id=item["sk"]["S"].removeprefix("a#"),
        key=ApprovalKey(item["tn"]["S"], item["pr"]["S"], item["tl"]["S"], item["dg"]["S"]),
        state=ApprovalState(item["st"]["S"]),
        created_ms=int(item["cr"]["N"]),
        expires_ms=int(item["ex"]["N"]),
        **optional,
    )


class ApprovalTable(Table):
    """Approvals, each change one conditional write."""

    def _read(self, tenant: str, sk: str, doing: str) -> dict[str, Any] | None:
        answer = call(
            lambda: self._client.get_item(
                TableName=self._table,
                Key={"pk": {"S": _pk(tenant)}, "sk": {"S": sk}},
                ConsistentRead=True,
            ),
            doing,
        )
        item = answer.get("Item")
        return dict(item) if item else None

    def latest(self, key: ApprovalKey) -> Approval | None:
        """The newest approval for this call, if any.

        Raises:
            StorageError: the store failed.
        """
        pointer = self._read(key.tenant, _pointer_sk(key), "reading a call's approval")
        if pointer is None:
            return None
        found = self._read(key.tenant, "a#" + pointer["cur"]["S"], "reading an approval")
        return None if found is None else _approval(found)

    def put_new(self, approval: Approval, replacing: str | None) -> Approval:
        """Store a new approval, then point its call at it unless another check did
        first (then the orphan is removed and the other one returned).

        Raises:
            RecordChanged: the winner vanished meanwhile.
            StorageError: the store failed.
        """
        doing = "asking for an approval"
        self._put(_item(approval), _NEW, {"#pk": "pk"}, {}, doing)
        values = {":cur": {"S": approval.approval_id}}
        names = {"#cur": "cur"}
        if replacing is not None:
            values[":replacing"] = {"S": replacing}
        pointer = {
            "pk": {"S": _pk(approval.key.tenant)},
            "sk": {"S": _pointer_sk(approval.key)},
            "cur": {"S": approval.approval_id},
            "expires_at": {"N": str(approval.expires_ms // 1000 + _KEEP_SECONDS)},
        }
        condition = _POINT_NEW if replacing is None else _POINT_FROM
        set_values = {k: v for k, v in values.items() if k != ":cur"}
        if self._put(pointer, condition, names, set_values, doing):
            return approval
        self._delete(approval)
        winner = self.latest(approval.key)
        if winner is None:
            raise RecordChanged(doing)
        return winner

    def _put(
        self,
        item: dict[str, Any],
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
        doing: str,
    ) -> bool:
        """One conditional PutItem; whether its condition held."""
        extra: dict[str, Any] = {"ExpressionAttributeValues": values} if values else {}
        try:
            conditional(
                lambda: self._client.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    **extra,
                ),
                doing,
            )
        except ConditionFailed:
            return False
        return True

    def _delete(self, approval: Approval) -> None:
        """Remove an approval no call points at (best effort: nothing uses it)."""
        key = {"pk": {"S": _pk(approval.key.tenant)}, "sk": {"S": "a#" + approval.approval_id}}
        try:
            self._client.delete_item(TableName=self._table, Key=key)
        except (ClientError, BotoCoreError):
            return

    def get(self, tenant: str, approval_id: str) -> Approval:
        """One approval.

        Raises:
            RecordNotFound: no such approval in this tenant.
            StorageError: the store failed.
        """
        found = self._read(tenant, "a#" + approval_id, "reading an approval")
        if found is None:
            raise RecordNotFound("reading an approval")
        return _approval(found)

    def list(self, tenant: str) -> list[Approval]:
        """The tenant's approvals, newest first.

        Raises:
            StorageError: the store failed.
        """
        names = {"#pk": "pk", "#sk": "sk"}
        values = {":pk": {"S": _pk(tenant)}, ":approvals": {"S": "a#"}}
        items = all_items(
            lambda start: self._client.query(**self._query(_OF_TENANT, names, values, start)),
            "listing approvals",
        )
        found = [_approval(i) for i in items]
        return sorted(found, key=lambda a: (a.created_ms, a.approval_id), reverse=True)

    def change(
        self, new: Approval, expected: ApprovalState, now_ms: int
    ) -> tuple[bool, Approval | None]:
        """Replace the approval if it is still `expected` and unexpired at `now_ms` (a
        give-back, expected `used`, ignores the expiry); whether it did, and the old one
        (None where the store does not hand it back).

        Raises:
            StorageError: the store failed.
        """
        values: dict[str, Any] = {":expected": {"S": expected.value}}
        names = {"#st": "st"}
        condition = _STILL
        if expected is not ApprovalState.USED:
            condition = _STILL_LIVE
            names["#ex"] = "ex"
            values[":now"] = {"N": str(now_ms)}
        doing = "changing an approval"
        try:
            conditional(
                lambda: self._client.put_item(
                    TableName=self._table,
                    Item=_item(new),
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
                doing,
            )
        except ConditionFailed as failed:
            old = failed.old_item
            return False, _approval(dict(old)) if old else None
        return True, None
