"""The quota policy: categories with their limits, and how a tool is classified.

Classification precedence, highest first: a policy rule for the tool (exact names, then
glob patterns in file order), the category the caller named, the tool's MCP annotations
(`readOnlyHint: true` is `read`, anything else `write`), and last the most restrictive
category, so that an unknown tool can never land in a generous budget by accident.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from chalicelib.quota.approvals import DEFAULT_APPROVAL_SECONDS
from chalicelib.quota.core import Scope
from chalicelib.quota.errors import ConfigurationError

POLICY_DIR = Path(__file__).parent.parent / "policies"
CATEGORY_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
READ = "read"
WRITE = "write"
DAY_SECONDS = 86_400
_WINDOW = re.compile(r"^([1-9][0-9]{0,4})([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": DAY_SECONDS}
DEFAULT_SUSPEND_AFTER = 50
RULE_KEYS = frozenset({"tools", "pattern", "category", "units_from", "approval"})
DEFAULT_LEASE_MAX = 10
DEFAULT_LEASE_SECONDS = 30
MAX_LEASE = 100  # the most calls one check may ask for; a category's lease_max is capped too
MAX_LEASE_SECONDS = 300
# The largest limit a policy may set: what the admin API lets a raise reach, well inside
# what DynamoDB stores exactly (38 digits) and JSON clients read back exactly (2**53).
MAX_LIMIT = 10**9
MAX_REPEAT = 100  # the loop breaker counts a few calls, not a budget
# Starting a session clears every other category's counters in one update expression,
# about 42 bytes each: past about 95 categories it outgrows DynamoDB's 4 KB expression
# limit and every new session fails. Far fewer are ever useful.
MAX_CATEGORIES = 32
# A tenant budget is split over this many items at most (each one item's ~1,000 writes/s).
MAX_SHARDS = 64
# The default: one shard per this many calls of the tenant limit, at most this many. A
# shard takes about limit / shards writes of its own, plus a few more (a container's
# first take of an item in a window, a probe racing another, the refusal mark): one per
# 6 keeps the hottest item under one write per 4 calls allowed (a limit of 60: 10 shards
# of 6), and 16 shards lift the ceiling to about 16,000 allowed calls a second. A small
# limit stays one item, counted exactly.
CALLS_PER_SHARD = 6
DEFAULT_MAX_SHARDS = 16


@dataclass(frozen=True)
class WindowLimit:
    """A limit over a fixed window aligned to UTC midnight (e.g. 100 per 24 h)."""

    scope: Scope
    limit: int
    window_seconds: int
    shards: int = 1
    """The items the budget is split over (the tenant's; a principal's is one item)."""

    def window_start_ms(self, now_ms: int) -> int:
        """The start of the window that holds `now_ms`."""
        window_ms = self.window_seconds * 1000
        return now_ms - now_ms % window_ms

    def window_end_ms(self, now_ms: int) -> int:
        """When the window that holds `now_ms` ends and the budget refills."""
        return self.window_start_ms(now_ms) + self.window_seconds * 1000


@dataclass(frozen=True)
class RepeatLimit:
    """How often a session may call one tool with the same arguments in a window."""

    limit: int
    window_seconds: int


@dataclass(frozen=True)
class Category:
    """One budget: how many calls a session may make in it, and optionally how many a
    principal and the whole tenant may make in a fixed window."""

    name: str
    limit: int
    max_limit: int
    notify: bool
    description: str = ""
    principal: WindowLimit | None = None
    tenant: WindowLimit | None = None
    lease: bool = False
    """Whether a client may reserve up to `lease_max` calls in one check (reads only)."""
    lease_max: int = DEFAULT_LEASE_MAX
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    """How long a client may spend a lease: with `lease_max`, the bound on how late a
    suspension or raise reaches a leasing client."""
    enforce: bool = True
    """False: shadow mode. A call over a limit runs, and is reported as the refusal it
    would have been (`shadow` in the answer, a `shadow_refusal` audit event)."""
    repeat: RepeatLimit | None = None
    """The loop breaker: at most `limit` calls of one tool with the same arguments per
    window in a session (None: no such limit)."""
    replay: bool = False
    """Whether a retry under an admitted call id gets the first run's stored result."""

    @property
    def windows(self) -> tuple[WindowLimit, ...]:
        """The scopes above the session, inner first: the order they are counted in."""
        return tuple(w for w in (self.principal, self.tenant) if w is not None)


@dataclass(frozen=True)
class Rule:
    """Maps exact tool names or one glob pattern to a category."""

    category: str
    tools: frozenset[str] = frozenset()
    pattern: str | None = None
    units_from: str | None = None
    """A list argument whose length a call of these tools weighs (the MCP side weighs
    calls with it: it reads the rules from `GET /v1/policy`)."""
    approval: bool = False
    """Each call of these tools needs a human's approval bound to it (issue 32)."""

    def matches(self, tool: str) -> bool:
        """Whether this rule applies to the tool name."""
        if tool in self.tools:
            return True
        return self.pattern is not None and fnmatchcase(tool, self.pattern)


@dataclass(frozen=True)
class Classification:
    """The category a call is counted in, and which precedence level chose it."""

    category: Category
    source: str  # "rule" | "request" | "annotations" | "default"


class SessionFrom(enum.StrEnum):
    """What an MCP server keys an unnamed session on (`"session_from"`)."""

    CALLER = "caller"  # principal (or server token), client id, server: the default
    TRANSPORT = "transport"  # a legacy Mcp-Session-Id, where the client sends one


def _session_from(value: Any) -> SessionFrom:
    """The policy's `session_from`.

    Raises:
        ConfigurationError: not one of the values.
    """
    try:
        return SessionFrom(value)
    except ValueError:
        names = ", ".join(repr(v.value) for v in SessionFrom)
        raise ConfigurationError(f"session_from must be one of {names}") from None


@dataclass(frozen=True)
class Policy:
    """The categories and rules of one stage."""

    categories: Mapping[str, Category]
    rules: tuple[Rule, ...]
    suspend_after_refusals: int = DEFAULT_SUSPEND_AFTER
    session_from: SessionFrom = SessionFrom.CALLER
    """Mirrored on the MCP side (`MCP_QUOTA_SESSION_FROM`): the service keys no session."""
    approval_seconds: int = DEFAULT_APPROVAL_SECONDS

    def needs_approval(self, tool: str) -> bool:
        """Whether the rule that classifies `tool` asks for an approval of each call."""
        exact = [r for r in self.rules if tool in r.tools]
        for rule in exact or [r for r in self.rules if r.matches(tool)]:
            return rule.approval
        return False

    @property
    def most_restrictive(self) -> Category:
        """The category with the smallest limit: where unknown tools go."""
        return min(self.categories.values(), key=lambda c: c.limit)

    def classify(
        self,
        tool: str,
        requested: str | None = None,
        read_only_hint: bool | None = None,
    ) -> Classification:
        """Choose the category a call to `tool` is counted in.

        The caller must have checked that `requested`, when given, is a known category.
        """
        exact = [r for r in self.rules if tool in r.tools]
        for rule in exact or [r for r in self.rules if r.matches(tool)]:
            return Classification(self.categories[rule.category], "rule")
        if requested is not None:
            return Classification(self.categories[requested], "request")
        if read_only_hint is not None:
            name = READ if read_only_hint else WRITE
            return Classification(self.categories[name], "annotations")
        return Classification(self.most_restrictive, "default")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(where: str, value: Any) -> int:
    if not _is_int(value) or not 1 <= value <= MAX_LIMIT:
        raise ConfigurationError(f"{where} must be an integer >= 1 and <= {MAX_LIMIT}")
    return int(value)


def _window_seconds(where: str, raw: Any) -> int:
    """A window such as "24h", "1h", "15m" or "7d": at least a minute, at most 31 days,
    and either dividing a day or a whole number of days, so windows align to UTC days."""
    match = _WINDOW.fullmatch(raw) if isinstance(raw, str) else None
    if match is None:
        raise ConfigurationError(f"{where} must look like 15m, 1h, 24h or 7d, got {raw!r:.40}")
    seconds = int(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if not 60 <= seconds <= 31 * DAY_SECONDS:
        raise ConfigurationError(f"{where} must be from 1m to 31d, got {raw!r:.40}")
    if DAY_SECONDS % seconds and seconds % DAY_SECONDS:
        raise ConfigurationError(
            f"{where} must divide a day (like 1h, 6h, 24h) or be whole days, got {raw!r:.40}"
        )
    return seconds


def default_shards(limit: int) -> int:
    """How many items a tenant budget of `limit` calls is split over when the policy does
    not say: one per `CALLS_PER_SHARD` calls, from 1 to `DEFAULT_MAX_SHARDS`."""
    return max(1, min(DEFAULT_MAX_SHARDS, limit // CALLS_PER_SHARD))


def shard_part(limit: int, shards: int, shard: int) -> int:
    """A shard's part of a limit split over `shards` items: `limit // shards`, the
    remainder spread over the first shards, so the parts add up to the limit exactly."""
    base, extra = divmod(limit, shards)
    return base + (1 if shard < extra else 0)


def _shards(where: str, raw: Any, limit: int) -> int:
    """A tenant budget's shards: each holds at least one call of the limit."""
    if raw is None:
        return default_shards(limit)
    if not _is_int(raw) or not 1 <= raw <= min(MAX_SHARDS, limit):
        raise ConfigurationError(
            f"{where} must be an integer from 1 to the limit and at most {MAX_SHARDS}"
        )
    return int(raw)


def _window_limit(category: str, scope: Scope, raw: Any, inner: int) -> WindowLimit | None:
    where = f"category {category!r} scope {scope.value!r}"
    if raw is None:
        return None
    keys = {"limit", "window", "shards"} if scope is Scope.TENANT else {"limit", "window"}
    if not isinstance(raw, dict) or not {"limit", "window"} <= set(raw) <= keys:
        extra = ", and optionally shards" if scope is Scope.TENANT else ""
        raise ConfigurationError(f"{where} must be an object of exactly limit and window{extra}")
    limit = _positive_int(f"{where}: limit", raw["limit"])
    if limit < inner:
        raise ConfigurationError(
            f"{where}: limit {limit} is below the scope inside it ({inner}), which could "
            "then never be reached"
        )
    seconds = _window_seconds(f"{where}: window", raw["window"])
    if scope is not Scope.TENANT:
        return WindowLimit(scope, limit, seconds)
    return WindowLimit(scope, limit, seconds, _shards(f"{where}: shards", raw.get("shards"), limit))


def _enforce(where: str, raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise ConfigurationError(f"{where}: enforce must be true or false")
    return raw


def _category(name: str, raw: Any, enforce: bool = True) -> Category:
    if not CATEGORY_NAME.fullmatch(name):
        raise ConfigurationError(f"category name {name!r} must match {CATEGORY_NAME.pattern}")
    if not isinstance(raw, dict):
        raise ConfigurationError(f"category {name!r} must be an object")
    unknown = set(raw) - {
        "limit",
        "max_limit",
        "notify",
        "description",
        "principal",
        "tenant",
        "lease",
        "lease_max",
        "lease_seconds",
        "enforce",
        "repeat",
        "replay",
    }
    if unknown:
        raise ConfigurationError(f"category {name!r} has unknown keys {sorted(unknown)}")
    limit = _positive_int(f"category {name!r}: limit", raw.get("limit"))
    max_limit = raw.get("max_limit", min(limit * 10, MAX_LIMIT))
    if not _is_int(max_limit) or not limit <= max_limit <= MAX_LIMIT:
        raise ConfigurationError(
            f"category {name!r}: max_limit must be an integer from limit to {MAX_LIMIT}"
        )
    notify = raw.get("notify", False)
    if not isinstance(notify, bool):
        raise ConfigurationError(f"category {name!r}: notify must be true or false")
    principal = _window_limit(name, Scope.PRINCIPAL, raw.get("principal"), limit)
    inner = principal.limit if principal else limit
    tenant = _window_limit(name, Scope.TENANT, raw.get("tenant"), inner)
    description = str(raw.get("description", ""))
    lease, lease_max, lease_seconds = _lease(name, raw, limit)
    enforcing = _enforce(f"category {name!r}", raw.get("enforce", enforce))
    return Category(
        name,
        limit,
        max_limit,
        notify,
        description,
        principal,
        tenant,
        lease,
        lease_max,
        lease_seconds,
        enforcing,
        _repeat(name, raw.get("repeat")),
        _replay(name, raw, lease),
    )


def _replay(name: str, raw: dict[str, Any], lease: bool) -> bool:
    """Whether a category replays results: by default every one but `read` and those
    that lease (a leased call is spent without a check, so it has nothing to replay).

    Raises:
        ConfigurationError: `replay` is not a boolean.
    """
    replay = raw.get("replay", name != "read" and not lease)
    if not isinstance(replay, bool):
        raise ConfigurationError(f"category {name!r}: replay must be true or false")
    return replay


def _repeat(category: str, raw: Any) -> RepeatLimit | None:
    """A category's loop breaker: `{"limit": N, "window": "10m"}`, or none."""
    where = f"category {category!r} repeat"
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) != {"limit", "window"}:
        raise ConfigurationError(f"{where} must be an object of exactly limit and window")
    limit = _positive_int(f"{where}: limit", raw["limit"])
    if limit > MAX_REPEAT:
        raise ConfigurationError(f"{where}: limit must be at most {MAX_REPEAT}")
    return RepeatLimit(limit, _window_seconds(f"{where}: window", raw["window"]))


def _lease(name: str, raw: dict[str, Any], limit: int) -> tuple[bool, int, int]:
    """A category's lease settings: reads lease by default, writes never may."""
    lease = raw.get("lease", name == READ)
    if not isinstance(lease, bool):
        raise ConfigurationError(f"category {name!r}: lease must be true or false")
    if lease and name == WRITE:
        raise ConfigurationError(
            f"category {name!r}: lease must not be true: tools that are not read-only "
            "(and unannotated ones) land here, and every such call needs its own check"
        )
    lease_max = raw.get("lease_max", min(DEFAULT_LEASE_MAX, limit))
    if not isinstance(lease_max, int) or isinstance(lease_max, bool):
        raise ConfigurationError(f"category {name!r}: lease_max must be an integer")
    if not 1 <= lease_max <= min(limit, MAX_LEASE):
        raise ConfigurationError(
            f"category {name!r}: lease_max must be from 1 to the limit and at most {MAX_LEASE}"
        )
    lease_seconds = raw.get("lease_seconds", DEFAULT_LEASE_SECONDS)
    if (
        not isinstance(lease_seconds, int)
        or isinstance(lease_seconds, bool)
        or not 1 <= lease_seconds <= MAX_LEASE_SECONDS
    ):
        raise ConfigurationError(
            f"category {name!r}: lease_seconds must be an integer from 1 to {MAX_LEASE_SECONDS}"
        )
    return lease, lease_max, lease_seconds


def _rule(index: int, raw: Any, categories: Mapping[str, Category]) -> Rule:
    where = f"rules[{index}]"
    if not isinstance(raw, dict) or set(raw) - RULE_KEYS:
        raise ConfigurationError(f"{where} must be an object of tools|pattern and category")
    category = raw.get("category")
    if not isinstance(category, str) or category not in categories:
        raise ConfigurationError(f"{where}: unknown category {category!r}")
    tools = raw.get("tools", [])
    pattern = raw.get("pattern")
    if not isinstance(tools, list) or not all(isinstance(t, str) for t in tools):
        raise ConfigurationError(f"{where}: tools must be a list of names")
    if pattern is not None and not isinstance(pattern, str):
        raise ConfigurationError(f"{where}: pattern must be a string")
    if bool(tools) == (pattern is not None):
        raise ConfigurationError(f"{where}: give exactly one of tools or pattern")
    units_from = raw.get("units_from")
    if units_from is not None and (not isinstance(units_from, str) or not units_from):
        raise ConfigurationError(f"{where}: units_from must name an argument")
    approval = raw.get("approval", False)
    if not isinstance(approval, bool):
        raise ConfigurationError(f"{where}: approval must be true or false")
    return Rule(str(category), frozenset(tools), pattern, units_from, approval)


def parse_policy(document: Mapping[str, Any]) -> Policy:
    """Validate a policy document and build the policy.

    Raises:
        ConfigurationError: the document is not a valid policy.
    """
    version = document.get("version")
    if not _is_int(version) or version != 1:
        raise ConfigurationError("policy version must be 1")
    unknown = set(document) - {
        "version",
        "categories",
        "rules",
        "suspend_after_refusals",
        "enforce",
        "session_from",
        "approval_seconds",
    }
    if unknown:
        raise ConfigurationError(f"policy has unknown keys {sorted(unknown)}")
    raw_categories = document.get("categories")
    if not isinstance(raw_categories, dict) or not raw_categories:
        raise ConfigurationError("policy must define categories")
    if len(raw_categories) > MAX_CATEGORIES:
        raise ConfigurationError(
            f"policy defines {len(raw_categories)} categories; at most {MAX_CATEGORIES}"
        )
    # The top-level `enforce` is every category's default; a category may set its own.
    enforce = _enforce("policy", document.get("enforce", True))
    categories = {name: _category(name, raw, enforce) for name, raw in raw_categories.items()}
    for required in (READ, WRITE):
        if required not in categories:
            raise ConfigurationError(f"policy must define the {required!r} category")
    most_restrictive = min(categories.values(), key=lambda c: c.limit)
    if most_restrictive.lease:
        raise ConfigurationError(
            f"category {most_restrictive.name!r}: lease must not be true: it has the smallest "
            "limit, so tools the policy does not know land there, and those may write"
        )
    raw_rules = document.get("rules", [])
    if not isinstance(raw_rules, list):
        raise ConfigurationError("rules must be a list")
    rules = tuple(_rule(i, raw, categories) for i, raw in enumerate(raw_rules))
    suspend_after = _positive_int(
        "suspend_after_refusals", document.get("suspend_after_refusals", DEFAULT_SUSPEND_AFTER)
    )
    approval_seconds = _positive_int(
        "approval_seconds", document.get("approval_seconds", DEFAULT_APPROVAL_SECONDS)
    )
    return Policy(
        categories=categories,
        rules=rules,
        suspend_after_refusals=suspend_after,
        session_from=_session_from(document.get("session_from", SessionFrom.CALLER.value)),
        approval_seconds=approval_seconds,
    )


def load_policy(name: str) -> Policy:
    """Load a policy document by file name from `chalicelib/policies/`, or by path.

    Raises:
        ConfigurationError: the file is missing or is not a valid policy.
    """
    path = Path(name) if "/" in name else POLICY_DIR / name
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    # ValueError: not JSON, or not UTF-8; RecursionError: nested past the parser's depth.
    except (OSError, ValueError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:200]
        raise ConfigurationError(f"cannot read policy {path}: {reason}") from exc
    if not isinstance(document, dict):
        raise ConfigurationError(f"policy {path} must be a JSON object")
    try:
        return parse_policy(document)
    except ConfigurationError as exc:
        raise ConfigurationError(f"policy {path}: {exc}") from exc
