"""The tokens port on DynamoDB: one item per token id, holding only the hash of the
secret."""

from __future__ import annotations

from typing import Any

from chalicelib.storage.dynamodb.updates import ConditionFailed, Table, all_items, call, conditional
from chalicelib.storage.ports import RecordNotFound
from chalicelib.storage.records import TokenRecord

TOKEN_ID = "token_id"
PRINCIPALS = "principals"  # a list (a string set would lose the order it was given in)
# Epoch ms. Not the table's TTL attribute: expiry is checked on every look-up, and an
# expired token's record stays, as a revoked one's does, for the audit trail to name.
EXPIRES_AT = "expires_at_ms"
_REVOKE = "SET #revoked = if_not_exists(#revoked, :now)"
_EXISTS = "attribute_exists(#id)"


def _record(item: dict[str, Any]) -> TokenRecord:
    revoked = item.get("revoked_at")
    expires = item.get(EXPIRES_AT)
    return TokenRecord(
        token_id=item[TOKEN_ID]["S"],
        secret_hash=item["secret_hash"]["S"],
        tenant=item["tenant"]["S"],
        role=item["role"]["S"],
        name=item.get("name", {}).get("S", ""),
        created_at_ms=int(item["created_at"]["N"]),
        revoked_at_ms=int(revoked["N"]) if revoked else None,
        principals=tuple(p["S"] for p in item.get(PRINCIPALS, {}).get("L", [])),
        expires_at_ms=int(expires["N"]) if expires else None,
    )


class TokenStore(Table):
    """Create, look up, list and revoke tokens."""

    def put(self, record: TokenRecord) -> None:
        """Store a new token record.

        Raises:
            StorageError: the store failed or the id is taken.
        """
        item: dict[str, Any] = {
            TOKEN_ID: {"S": record.token_id},
            "secret_hash": {"S": record.secret_hash},
            "tenant": {"S": record.tenant},
            "role": {"S": record.role},
            "name": {"S": record.name or "-"},
            "created_at": {"N": str(record.created_at_ms)},
        }
        if record.principals:
            item[PRINCIPALS] = {"L": [{"S": p} for p in record.principals]}
        if record.expires_at_ms is not None:
            item[EXPIRES_AT] = {"N": str(record.expires_at_ms)}
        call(lambda: self._client.put_item(**self._as_new(item, TOKEN_ID)), "storing a token")

    def get(self, token_id: str) -> TokenRecord | None:
        """Look a token up by its public id.

        Raises:
            StorageError: the store failed.
        """
        response = call(
            lambda: self._client.get_item(TableName=self._table, Key={TOKEN_ID: {"S": token_id}}),
            "looking up a token",
        )
        item = response.get("Item")
        return _record(item) if item else None

    def revoke(self, token_id: str, now_ms: int) -> TokenRecord:
        """Mark a token revoked (idempotent: the first revocation time is kept).

        Raises:
            RecordNotFound: no such token.
            StorageError: the store failed.
        """
        try:
            response = conditional(
                lambda: self._client.update_item(
                    TableName=self._table,
                    Key={TOKEN_ID: {"S": token_id}},
                    UpdateExpression=_REVOKE,
                    ConditionExpression=_EXISTS,
                    ExpressionAttributeNames={"#revoked": "revoked_at", "#id": TOKEN_ID},
                    ExpressionAttributeValues={":now": {"N": str(now_ms)}},
                    ReturnValues="ALL_NEW",
                ),
                "revoking a token",
            )
        except ConditionFailed as failed:
            raise RecordNotFound("revoking a token") from failed
        return _record(response["Attributes"])

    def list(self, tenant: str | None = None) -> list[TokenRecord]:
        """All tokens (optionally of one tenant); an operator's listing, not a hot path.

        Raises:
            StorageError: the store failed.
        """
        items = all_items(
            lambda start: self._client.scan(TableName=self._table, **start), "listing tokens"
        )
        records = [_record(item) for item in items]
        if tenant is not None:
            records = [r for r in records if r.tenant == tenant]
        return sorted(records, key=lambda r: r.created_at_ms)
