"""The framework-independent guard of a tool call: set-up, the check, the refusal, the meta.

The FastMCP middleware and the SDK guard are thin adapters around `ToolCallGuard`: they
turn their framework's request into a `CallerInfo` and the guard's `Verdict` back into
their framework's result type. Everything else (the client from the environment, the
principal, the session key, the refusal's text and structured content, the decision
`_meta`) is decided here once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from mcp_quota_client.call_state import CallStateSealer, OpenedState
from mcp_quota_client.client import QuotaClient
from mcp_quota_client.decision import CheckRequest, Decision, Outcome, ToolAnnotations
from mcp_quota_client.feedback import decision_meta, refusal_structured, refusal_text
from mcp_quota_client.session import (
    META_DECISION_KEY,
    META_SESSION_KEY,
    META_SHADOW_KEY,
    CallerInfo,
    SessionIdentity,
    SessionKeying,
    resolve_call_id,
    resolve_session,
    token_identity,
)

PrincipalResolver = Callable[[], str | None]
"""Returns who the current request acts for, or None. Called inside the request."""
Cost = Callable[[Mapping[str, Any]], int]
"""What a call to a tool weighs, from its arguments: e.g. `lambda a: len(a["tags"])`."""
MAX_UNITS = 1000
"""The most units one check may weigh (the service's limit)."""

logger = logging.getLogger("mcp_quota_client")


def args_digest(arguments: Mapping[str, Any] | None) -> str | None:
    """SHA-256 (hex) of a tool's arguments as canonical JSON (sorted keys, no spaces,
    UTF-8): equal arguments give equal digests whatever their order. None if they are
    not JSON."""
    try:
        text = json.dumps(
            dict(arguments or {}),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
    except (TypeError, ValueError):
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


MAX_PREVIEW = 4096
"""The most characters of arguments a check may carry (the service's limit)."""


def preview(arguments: Mapping[str, Any] | None) -> str:
    """The arguments as the approver sees them: JSON, cut to what a check may carry."""
    text = json.dumps(dict(arguments or {}), ensure_ascii=False, default=str)
    return text if len(text) <= MAX_PREVIEW else text[: MAX_PREVIEW - 1] + "…"


_HINTS = (
    ("read_only_hint", "readOnlyHint"),
    ("destructive_hint", "destructiveHint"),
    ("idempotent_hint", "idempotentHint"),
    ("open_world_hint", "openWorldHint"),
)


def annotations_from(model: object | None) -> ToolAnnotations | None:
    """Wire-named hints from an MCP `ToolAnnotations` model (fastmcp or the SDK)."""
    if model is None:
        return None
    result: ToolAnnotations = {}
    for attribute, wire in _HINTS:
        value = getattr(model, attribute, None)
        if isinstance(value, bool):
            result[wire] = value  # type: ignore[literal-required]
    title = getattr(model, "title", None)
    if isinstance(title, str) and title:
        result["title"] = title
    return result or None


@dataclass(frozen=True)
class Refusal:
    """What a refused call answers instead of running: a tool result with `isError`."""

    text: str
    structured: dict[str, Any]


@dataclass(frozen=True)
class GuardedCall:
    """A decided tool call, the session it was counted in, and what to answer."""

    decision: Decision
    identity: SessionIdentity
    meta: Mapping[str, Any] | None = None
    """`_meta` entries to add to the result, allowed or refused (None: add nothing)."""
    call_id: str | None = None
    """The call id the check was sent with: an MRTR retry of this call carries it back."""
    who: str = "-"
    """Whom the call was checked for (principal, else server token): MRTR state binding."""
    args_digest: str | None = None
    retry_key: str | None = None
    """The call id if the client can send it again (its `_meta` call id, or one our
    sealed `requestState` carried back); None for one generated for this request."""

    @property
    def refusal(self) -> Refusal | None:
        """The answer in place of the tool's, or None when the tool may run."""
        if self.decision.allowed:
            return None
        return Refusal(refusal_text(self.decision), refusal_structured(self.decision))


def server_field(name: str | None) -> str | None:
    """The server's name as the check's `server` field takes it: printable ASCII, at most
    128 characters (others become `?`), so an unusual name never makes a check invalid."""
    if name is None or not name.strip():
        return None
    return "".join(c if " " <= c <= "~" else "?" for c in name.strip())[:128]


@dataclass
class ToolCallGuard:
    """Counts each tool call with the quota service before it runs."""

    client: QuotaClient
    keying: SessionKeying = SessionKeying.CLIENT
    categories: Mapping[str, str] = field(default_factory=dict)
    """Explicit category per tool name, sent as `category` (a policy rule still wins)."""
    principal: PrincipalResolver = lambda: None
    attach_decision_meta: bool = True
    server_name: str | None = None
    """This MCP server's name in derived session keys; None: the framework's server name."""
    costs: Mapping[str, Cost] = field(default_factory=dict)
    """Units per tool name, from the call's arguments; other tools weigh 1."""
    states: CallStateSealer = field(default_factory=CallStateSealer.from_env)
    """Seals the call id into an MRTR `requestState` and opens it on the retry."""
    needs_approval: Callable[[str], bool] = lambda tool: False
    """Whether a tool's calls need an approval (the service's rules): only their checks
    carry the arguments (`arguments_preview`), for the approver to see."""

    @classmethod
    def create(
        cls,
        client: QuotaClient | None,
        *,
        keying: SessionKeying | None,
        categories: Mapping[str, str] | None,
        principal_resolver: PrincipalResolver | None,
        default_principal: PrincipalResolver,
        attach_decision_meta: bool,
        server_name: str | None,
        costs: Mapping[str, Cost] | None = None,
    ) -> ToolCallGuard:
        """The guard an adapter's options describe; `client` defaults to the environment's.

        `keying` None: `MCP_QUOTA_SESSION_FROM` (mirroring the policy's `session_from`),
        else `SessionKeying.CLIENT`.

        Raises:
            QuotaConfigError: no client given and `MCP_QUOTA_URL`/`MCP_QUOTA_TOKEN` unset.
            ValueError: `MCP_QUOTA_SESSION_FROM` or `MCP_QUOTA_STATE_KEY` is invalid.
        """
        return cls(
            client if client is not None else QuotaClient.from_env(),
            keying if keying is not None else SessionKeying.from_env(os.environ),
            dict(categories or {}),
            principal_resolver or default_principal,
            attach_decision_meta,
            server_name,
            dict(costs or {}),
        )

    def caller_of(self, caller: CallerInfo) -> CallerInfo:
        """The caller with this guard's server name and server token identity."""
        if self.server_name is not None:
            caller = replace(caller, server_name=self.server_name)
        if caller.server_identity is None:
            caller = replace(caller, server_identity=token_identity(self.client.config.token))
        return caller

    def open_state(
        self, caller: CallerInfo, arguments: Mapping[str, Any] | None, state: object
    ) -> OpenedState | None:
        """Our envelope in an MRTR retry's `requestState`, opened; None when there is
        none, or it is not genuine, expired, or another caller's or arguments' (the
        retry is then a new call, counted)."""
        if not isinstance(state, str):
            return None
        return self.states.open(state, _who(self.caller_of(caller)), args_digest(arguments))

    def seal_state(self, guarded: GuardedCall, inner: str | None) -> str | None:
        """The `requestState` to hand out for a tool's `input_required` answer: the
        tool's own `inner`, sealed with the call id its check used."""
        if guarded.call_id is None:
            return inner
        return self.states.seal(guarded.call_id, inner, guarded.who, guarded.args_digest)

    async def decide(
        self,
        tool: str,
        annotations: ToolAnnotations | None,
        caller: CallerInfo,
        arguments: Mapping[str, Any] | None = None,
    ) -> GuardedCall:
        """Resolve the session, call id and weight, then ask the quota service."""
        caller = self.caller_of(caller)
        identity = resolve_session(caller, self.keying)
        digest = args_digest(arguments)
        # Every check has a call id, so that an MRTR retry can carry it back.
        retry_key = resolve_call_id(caller)
        call_id = retry_key or f"gen-{uuid.uuid4().hex}"
        request = CheckRequest(
            session_id=identity.session_id,
            tool=tool,
            category=self.categories.get(tool),
            annotations=annotations,
            principal=caller.principal,
            call_id=call_id,
            server=server_field(caller.server_name),
            units=self._units(tool, arguments),
            args_digest=digest,
            client=caller.client,
            session_token=identity.minted,
            mint_session=identity.mint,
            transport_session_id=identity.transport,
            arguments_preview=preview(arguments) if self.needs_approval(tool) else None,
        )
        who = _who(caller)
        if request.units > MAX_UNITS:
            return GuardedCall(_too_heavy(request), identity, None, call_id, who, digest)
        decision = await self.client.check(request)
        meta: dict[str, Any] = {}
        if decision.allowed and self.attach_decision_meta:
            meta[META_DECISION_KEY] = decision_meta(decision)
        if decision.allowed and decision.shadow is not None:
            # Shadow mode: the call runs, and its result says what would have refused it.
            meta[META_SHADOW_KEY] = decision.shadow.to_json()
        if decision.session_token is not None:
            # The client echoes it under the same key: its next call is in this session.
            meta[META_SESSION_KEY] = decision.session_token
        return GuardedCall(decision, identity, meta or None, call_id, who, digest, retry_key)

    def _units(self, tool: str, arguments: Mapping[str, Any] | None) -> int:
        """What the call weighs: its tool's cost of its arguments, at least 1. A cost
        that fails (arguments the tool will reject too) weighs 1."""
        cost = self.costs.get(tool)
        if cost is None:
            return 1
        try:
            units = int(cost(arguments or {}))
        except Exception:
            logger.warning("mcp-quota: the cost of tool %r failed; it weighs 1", tool)
            return 1
        return max(1, units)


def _who(caller: CallerInfo) -> str:
    """Whom a call is for, as MRTR state binds it: the principal, else the server token."""
    return caller.principal or caller.server_identity or "-"


def _too_heavy(request: CheckRequest) -> Decision:
    """A call weighing more than one check may: refused here, nothing counted."""
    return Decision(
        allowed=False,
        outcome=Outcome.QUOTA_EXCEEDED,
        session_id=request.session_id,
        tool=request.tool,
        message=(
            f"The tool '{request.tool}' was NOT run: it weighs {request.units} units, more "
            f"than the {MAX_UNITS} one call may. Split the work into smaller calls."
        ),
        error_code="too_many_units",
        attempts=0,
    )
