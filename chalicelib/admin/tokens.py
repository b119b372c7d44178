"""Administrator actions on the tenant's bearer tokens: create (the secret shown once),
list and revoke. Every change is audited in the tenant's own events, never with a secret."""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalicelib.admin.requests import TokenRequest
from chalicelib.admin.views import token_view
from chalicelib.auth.tokens import Identity, hash_secret, new_token
from chalicelib.check.auditing import Auditor
from chalicelib.clock import Clock
from chalicelib.errors import NotFound
from chalicelib.quota.events import TENANT_SCOPE, AuditEvent, EventType
from chalicelib.storage.ports import RecordNotFound, TokenRepository
from chalicelib.storage.records import TokenRecord

if TYPE_CHECKING:
    from chalicelib.api.schemas import TokenCreated, TokenList, TokenView


class TokenAdmin:
    """Backs `/v1/tokens`; the tenant always comes from the caller's token."""

    def __init__(self, tokens: TokenRepository, auditor: Auditor, clock: Clock) -> None:
        self._tokens = tokens
        self._auditor = auditor
        self._clock = clock

    def _audit(self, who: Identity, event_type: EventType, after: TokenView) -> None:
        event = AuditEvent(
            self._clock(), event_type, who.tenant, TENANT_SCOPE, who.actor, after=after
        )
        self._auditor.record(event)

    def create(self, who: Identity, request: TokenRequest) -> TokenCreated:
        """A new token of the caller's tenant: its record, and the token itself, shown once.

        Raises:
            StorageError: the store failed.
        """
        token_id, token = new_token()
        record = TokenRecord(
            token_id=token_id,
            secret_hash=hash_secret(token),
            tenant=who.tenant,
            role=request.role,
            name=request.name,
            created_at_ms=self._clock(),
            principals=request.principals,
        )
        self._tokens.put(record)
        shown = token_view(record)
        self._audit(who, EventType.TOKEN_CREATED, shown)
        return {**shown, "token": token}

    def list(self, who: Identity) -> TokenList:
        """The tenant's tokens, oldest first, without secrets or hashes.

        Raises:
            StorageError: the store failed.
        """
        return {"tokens": [token_view(r) for r in self._tokens.list(who.tenant)]}

    def revoke(self, who: Identity, token_id: str) -> TokenView:
        """Revoke one of the tenant's tokens; revoking it again changes (and audits) nothing.

        Raises:
            NotFound: no such token in this tenant.
            StorageError: the store failed.
        """
        missing = NotFound(f"No token {token_id!r} in this tenant.")
        record = self._tokens.get(token_id)
        if record is None or record.tenant != who.tenant:
            raise missing
        if record.revoked:
            return token_view(record)
        now = self._clock()
        try:
            record = self._tokens.revoke(token_id, now)
        except RecordNotFound as exc:
            raise missing from exc
        shown = token_view(record)
        if record.revoked_at_ms == now:  # the store keeps an earlier, concurrent revocation
            self._audit(who, EventType.TOKEN_REVOKED, shown)
        return shown
