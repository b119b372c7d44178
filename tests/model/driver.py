"""Every call the model test makes into the service, in one place: the HTTP routes through
Chalice's test client, the injected clock, the captured emails and the injected store
faults. When the service's routes, bodies or wiring change, this is the file to adapt.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError
from chalice.test import Client

import app as app_module
from chalicelib.aws import CLIENT_CONFIG
from chalicelib.observability import SERVICE
from chalicelib.observability import logger as service_logger
from chalicelib.storage.dynamodb.layout import UNCOUNTED
from chalicelib.storage.ports import BudgetCounters, SessionCounters, StoreUnavailable
from chalicelib.wiring import Container
from tests.integration.lossy import endpoint, lossy_proxy
from tests.support import ROOT, T0, FixedClock, client_for, fresh_settings, provisioned

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sns import SNSClient

    from chalicelib.notify import Notifier
    from chalicelib.settings import Settings

SERVER_TOKEN = "dev-server-token"  # the fixed development tokens
ADMIN_TOKEN = "dev-admin-token"
TOPIC = "arn:aws:sns:us-east-1:000000000000:model-alerts"
ESCALATED = re.compile(r"principal (\S+) suspended$")
THROTTLED = "ProvisionedThroughputExceededException"


# -- injected faults ---------------------------------------------------------------------


@dataclass
class FaultPlan:
    """Fail store requests `skip` .. `skip + count - 1` (counted from 0) of one operation
    with a throttling fault: a request that was certainly not applied."""

    skip: int
    count: int
    seen: int = 0
    fired: int = 0

    def next_request_fails(self) -> bool:
        index = self.seen
        self.seen += 1
        if self.skip <= index < self.skip + self.count:
            self.fired += 1
            return True
        return False


@dataclass
class LossPlan:
    """Lose the answer of session write request `index` (counted from 0) of one
    operation: the store applies the write, its answer never comes back, and the SDK
    sends it again (the retry is a request too)."""

    index: int
    seen: int = 0
    lost: int = 0

    def next_write_loses(self) -> bool:
        index = self.seen
        self.seen += 1
        if index == self.index:
            self.lost += 1
            return True
        return False


@dataclass
class Faults:
    """The plans in force, if any: armed for one operation by `Driver`."""

    plan: FaultPlan | None = None
    loss: LossPlan | None = None
    # Lose no take-back's answer (a counted call a wider budget refused): open, a
    # take-back sent again is applied twice (tests/model/README.md, `lost_take_back`).
    spare_take_backs: bool = False

    def hit(self) -> bool:
        return self.plan is not None and self.plan.next_request_fails()

    def lose(self) -> bool:
        return self.loss is not None and self.loss.next_write_loses()


# The session store's writes a check or a lease return makes (memory: one method call is
# one request), whose answer a lost-answer step may lose.
SESSION_WRITES = frozenset(
    {
        "consume",
        "reset_expired",
        "restart_suspended",
        "record_block",
        "admit",
        "record_replay",
        "uncount",
        "return_lease",
    }
)


class FaultyStore:
    """A memory store whose every method call is one store request that may fail, and
    (`writes`) whose chosen write may lose its answer: it is applied, then applied again
    as botocore sends a request again, and the caller gets the second answer."""

    def __init__(self, store: object, faults: Faults, writes: frozenset[str] = frozenset()) -> None:
        self._store = store
        self._faults = faults
        self._writes = writes

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._store, name)
        if name.startswith("_") or not callable(target):
            return target

        def request(*args: Any, **kwargs: Any) -> Any:
            if self._faults.hit():
                raise StoreUnavailable(f"injected fault in {name}", 1, throttled=True)
            spared = name == "uncount" and self._faults.spare_take_backs
            if name in self._writes and not spared and self._faults.lose():
                target(*args, **kwargs)  # applied; its answer is lost on the way back
            return target(*args, **kwargs)

        return request


def session_write_of(faults: Faults) -> Callable[[str, dict[str, object]], bool]:
    """The lossy proxy's choice on DynamoDB: an update of a session's item (its key holds
    the adapter's `tenant#session` form; a budget's does not) whose answer the plan
    loses."""

    def choose(target: str, body: dict[str, object]) -> bool:
        key = body.get("Key")
        pk = key.get("pk") if isinstance(key, dict) else None
        item = pk.get("S") if isinstance(pk, dict) else None
        session = target.endswith(".UpdateItem") and isinstance(item, str) and "#" in item
        values = json.dumps(body.get("ExpressionAttributeValues", {}))
        spared = faults.spare_take_backs and f'"{UNCOUNTED}' in values
        return session and not spared and faults.lose()

    return choose


def _tables(params: dict[str, Any]) -> set[str]:
    """The tables one DynamoDB request touches."""
    names = {str(params["TableName"])} if "TableName" in params else set()
    names.update(str(t) for t in params.get("RequestItems", {}))
    for item in params.get("TransactItems", []):
        for action in item.values():
            if isinstance(action, dict) and "TableName" in action:
                names.add(str(action["TableName"]))
    return names


def install_fault_hook(client: DynamoDBClient, faults: Faults, table: str) -> None:
    """Make requests to `table` fail as the plan says, before they are sent (botocore's
    own retries never see them: the fault is what the service gets after its retries)."""

    def before(params: dict[str, Any], model: Any, **_: Any) -> None:
        if table in _tables(params) and faults.hit():
            error = {"Error": {"Code": THROTTLED, "Message": "injected by the model test"}}
            raise ClientError(error, model.name)  # type: ignore[arg-type]

    client.meta.events.register("before-parameter-build.dynamodb", before)


# -- captured email --------------------------------------------------------------------


@dataclass
class Outbox:
    """Stands in for SNS: keeps what the notifier publishes."""

    sent: list[dict[str, Any]] = field(default_factory=list)

    def publish(self, **message: Any) -> dict[str, str]:
        self.sent.append(message)
        return {"MessageId": f"m-{len(self.sent)}"}

    def escalations(self) -> dict[str, int]:
        """Principal-suspended emails, by principal."""
        out: dict[str, int] = {}
        for message in self.sent:
            event = message.get("MessageAttributes", {}).get("event", {}).get("StringValue")
            found = ESCALATED.search(str(message.get("Subject", "")))
            if event == "principal_suspended" and found:
                out[found.group(1)] = out.get(found.group(1), 0) + 1
        return out


# -- the service -----------------------------------------------------------------------


class ModelContainer(Container):
    """The service's container with the model test's clock, email capture, DynamoDB
    client, and (memory backend) stores that fail on demand."""

    def __init__(
        self,
        settings: Settings,
        clock: FixedClock,
        faults: Faults,
        outbox: Outbox,
        dynamodb: DynamoDBClient | None,
    ) -> None:
        super().__init__(settings=settings, clock=clock)
        self._faults = faults
        self._outbox = outbox
        self._client = dynamodb

    @cached_property
    def dynamodb(self) -> DynamoDBClient:
        assert self._client is not None
        return self._client

    @cached_property
    def counters(self) -> SessionCounters:
        store = super().counters
        return (
            cast("SessionCounters", FaultyStore(store, self._faults, SESSION_WRITES))
            if self.settings.backend == "memory"
            else store
        )

    @cached_property
    def budgets(self) -> BudgetCounters:
        store = super().budgets
        return (
            cast("BudgetCounters", FaultyStore(store, self._faults))
            if self.settings.backend == "memory"
            else store
        )

    @cached_property
    def notifier(self) -> Notifier:
        from chalicelib.notify import Notifier  # noqa: PLC0415 - as wiring imports it

        return Notifier(lambda: cast("SNSClient", self._outbox), TOPIC)


@dataclass
class Backend:
    """One backend for a whole test: the test client, and DynamoDB tables if any."""

    name: str
    http: Client
    policy: str
    faults: Faults
    dynamodb: DynamoDBClient | None = None
    tables: Settings | None = None


@contextmanager
def open_backend(name: str, policy: Path, dynalite: str | None = None) -> Iterator[Backend]:
    """The service on the memory backend, or on dynalite at `dynalite` (fresh tables)."""
    faults = Faults()
    client = tables = None
    # Built here, outside the requests' redirected stdout, with its usual level, so that
    # later tests in this process log as before.
    service_logger._get()
    service_log = logging.getLogger(SERVICE)
    level = service_log.level
    service_log.setLevel(logging.CRITICAL)  # refusals and faults are the point, not news
    try:
        with (
            _lossy(dynalite, faults) as through,
            Client(app_module.app, stage_name="local", project_dir=str(ROOT)) as http,
        ):
            if through is not None:
                # The service's client talks to the store through a proxy that loses the
                # answer of a session write when a step asks for it.
                client = client_for(through, pool=8, base=CLIENT_CONFIG)
                tables = provisioned(client, fresh_settings(f"m{uuid.uuid4().hex[:8]}"))
                install_fault_hook(client, faults, tables.counters_table)
            yield Backend(name, http, str(policy), faults, client, tables)
    finally:
        service_log.setLevel(level)


@contextmanager
def _lossy(upstream: str | None, faults: Faults) -> Iterator[str | None]:
    """`tests/integration/lossy.py`'s proxy in front of `upstream`, choosing by the plan."""
    if upstream is None:
        yield None
        return
    with lossy_proxy(upstream, session_write_of(faults)) as proxy:
        yield endpoint(proxy)


@dataclass(frozen=True)
class Answer:
    """What the service answered, in the terms the model predicts."""

    status: int
    body: dict[str, Any]
    retry_after: str | None
    faulted: bool = False  # an injected fault fired while answering
    lost: bool = False  # a session write's answer was lost (and sent again) meanwhile

    @property
    def code(self) -> str | None:
        error = self.body.get("error")
        return str(error.get("code")) if isinstance(error, dict) else None

    @property
    def scope(self) -> str | None:
        error = self.body.get("error")
        return str(error.get("scope")) if isinstance(error, dict) else None

    @property
    def duplicate(self) -> bool:
        return bool(self.body.get("duplicate"))

    @property
    def lease_id(self) -> str | None:
        lease = self.body.get("lease")
        return str(lease["id"]) if isinstance(lease, dict) else None

    @property
    def granted(self) -> int | None:
        lease = self.body.get("lease")
        return int(lease["granted"]) if isinstance(lease, dict) else None

    @property
    def returned(self) -> int | None:
        value = self.body.get("returned")
        return int(value) if isinstance(value, int) else None

    def describe(self) -> str:
        return f"{self.status} {json.dumps(self.body, sort_keys=True)[:300]}"


@dataclass(frozen=True)
class Observed:
    """The admin views, read back after a step, in the shape of `model.View`."""

    sessions: dict[str, tuple[str, dict[str, int]]]  # shown by GET /v1/sessions/{id}
    limits: dict[str, dict[str, int]]
    listing: dict[str, tuple[str, ...]]  # the states the listing reports, by session
    principals: dict[str, tuple[str, int]]
    principal_limits: dict[str, int]
    tenant: dict[str, int]
    tenant_limits: dict[str, int]
    escalations: dict[str, int]
    streaks: dict[str, dict[str, int]]  # principal: refusals in a row, by category


def args_digest(args: str) -> str:
    """The digest a client sends for a call's arguments (SHA-256, lowercase hex)."""
    return hashlib.sha256(args.encode()).hexdigest()


def _check_body(
    session: str,
    tool: str,
    category: str | None,
    principal: str | None,
    call_id: str | None,
    args: str | None,
    lease: int | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"session_id": session, "tool": tool}
    digest = args_digest(args) if args is not None else None
    optional = {"category": category, "principal": principal, "call_id": call_id}
    body.update({k: v for k, v in {**optional, "args_digest": digest}.items() if v is not None})
    if lease is not None:
        body["lease"] = lease
    return body


class Driver:
    """One fresh tenant of the service: every request of one Hypothesis example."""

    def __init__(self, backend: Backend, tenant: str) -> None:
        self._backend = backend
        self.clock = FixedClock(T0)
        self.outbox = Outbox()
        base = backend.tables or fresh_settings("memory")
        settings = fresh_settings(
            "unused",
            backend="dynamodb" if backend.dynamodb is not None else "memory",
            counters_table=base.counters_table,
            tokens_table=base.tokens_table,
            audit_table=base.audit_table,
            grants_table=base.grants_table,
            topic_arn=TOPIC,
            policy=backend.policy,
            idle_timeout_seconds=30,
            dev_tenant=tenant,
        )
        backend.faults.plan = backend.faults.loss = None
        container = ModelContainer(
            settings, self.clock, backend.faults, self.outbox, backend.dynamodb
        )
        app_module.reset_dependencies(container)
        self._container = container

    def close(self) -> None:
        self._backend.faults.plan = self._backend.faults.loss = None
        app_module.reset_dependencies(None)

    # -- transport ---------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        token: str,
        fault: FaultPlan | None,
        loss: LossPlan | None = None,
    ) -> Answer:
        faults = self._backend.faults
        faults.plan, faults.loss = fault, loss
        try:
            with redirect_stdout(io.StringIO()):  # the service's metric lines (EMF)
                answer = self._send(method, path, body, token)
        finally:
            faults.plan = faults.loss = None
        return replace(
            answer,
            faulted=fault is not None and fault.fired > 0,
            lost=loss is not None and loss.lost > 0,
        )

    def _send(self, method: str, path: str, body: dict[str, Any] | None, token: str) -> Answer:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        raw = json.dumps(body).encode() if body is not None else b""
        response = self._backend.http.http.request(method, path, headers=headers, body=raw)
        parsed = json.loads(response.body) if response.body else {}
        return Answer(
            response.status_code,
            parsed if isinstance(parsed, dict) else {},
            response.headers.get("Retry-After"),
        )

    def _admin(self, path: str, body: dict[str, Any]) -> Answer:
        return self._request("POST", path, body, ADMIN_TOKEN, None)

    def _get(self, path: str) -> Answer:
        return self._request("GET", path, None, ADMIN_TOKEN, None)

    # -- the MCP server's side -----------------------------------------------------------

    def check(
        self,
        session: str,
        tool: str,
        *,
        category: str | None = None,
        principal: str | None = None,
        call_id: str | None = None,
        args: str | None = None,
        lease: int | None = None,
        fault: FaultPlan | None = None,
        loss: LossPlan | None = None,
        report: dict[str, Any] | None = None,
    ) -> Answer:
        """One check; `args` stands for the call's arguments (sent as their digest);
        `report`: refusals the client says it held (`refused_locally`), as it sends them."""
        body = _check_body(session, tool, category, principal, call_id, args, lease)
        if report is not None:
            body["refused_locally"] = report
        return self._request("POST", "/v1/check", body, SERVER_TOKEN, fault, loss)

    def check_copies(
        self,
        copies: int,
        session: str,
        tool: str,
        *,
        category: str | None = None,
        principal: str | None = None,
        call_id: str | None = None,
        args: str | None = None,
        lease: int | None = None,
    ) -> list[Answer]:
        """`copies` copies of one check sent at once, each on its own thread, as a client
        whose retries overlap (or several replicas of one agent) sends them."""
        body = _check_body(session, tool, category, principal, call_id, args, lease)
        switch = sys.getswitchinterval()
        # Short time slices, so that the copies' store requests interleave.
        sys.setswitchinterval(1e-5)
        try:
            with redirect_stdout(io.StringIO()), ThreadPoolExecutor(copies) as pool:
                # Each copy's request is the same, so Chalice's one `current_request`
                # (shared by its threads, as under `chalice local`) serves either alike.
                sent = [
                    pool.submit(self._send, "POST", "/v1/check", body, SERVER_TOKEN)
                    for _ in range(copies)
                ]
                return [future.result() for future in sent]
        finally:
            sys.setswitchinterval(switch)

    def return_lease(
        self,
        session: str,
        lease_id: str,
        unused: int,
        fault: FaultPlan | None = None,
        loss: LossPlan | None = None,
    ) -> Answer:
        body = {"session_id": session, "lease": lease_id, "unused": unused}
        return self._request("POST", "/v1/leases/return", body, SERVER_TOKEN, fault, loss)

    # -- the administrator's side --------------------------------------------------------

    def session_admin(self, action: str, session: str, category: str, add: int) -> Answer:
        """raise (by `add`), lower, suspend, resume or reset a session."""
        body: dict[str, Any] = {"reason": "model test"}
        if action == "raise":
            body.update(category=category, add=add)
        elif action == "lower":
            body.update(category=category)
        return self._admin(f"/v1/sessions/{session}/{action}", body)

    def principal_admin(self, action: str, principal: str, category: str, add: int) -> Answer:
        """raise (by `add`), suspend, resume or reset a principal."""
        body: dict[str, Any] = {"reason": "model test"}
        if action == "raise":
            body.update(category=category, add=add)
        return self._admin(f"/v1/principals/{principal}/{action}", body)

    def advance(self, ms: int) -> None:
        self.clock.now_ms += ms

    # -- what the views show ----------------------------------------------------------

    def observe(self, sessions: list[str], principals: tuple[str, ...]) -> Observed:
        shown: dict[str, tuple[str, dict[str, int]]] = {}
        limits: dict[str, dict[str, int]] = {}
        for sid in sessions:
            answer = self._get(f"/v1/sessions/{sid}")
            if answer.status == 404:
                shown[sid] = ("(not found)", {})
                continue
            assert answer.status == 200, answer.describe()
            cats = answer.body["categories"]
            shown[sid] = (str(answer.body["state"]), {c: int(v["used"]) for c, v in cats.items()})
            limits[sid] = {c: int(v["limit"]) for c, v in cats.items()}
        listed = self._get("/v1/sessions?limit=100")
        assert listed.status == 200, listed.describe()
        listing: dict[str, tuple[str, ...]] = {}
        for row in listed.body["sessions"]:
            states = (str(row["state"]), str(row.get("listing_state", row["state"])))
            listing[str(row["session_id"])] = states
        people: dict[str, tuple[str, int]] = {}
        people_limits: dict[str, int] = {}
        streaks: dict[str, dict[str, int]] = {}
        for name in principals:
            answer = self._get(f"/v1/principals/{name}")
            assert answer.status == 200, answer.describe()
            write = answer.body["categories"]["write"]
            people[name] = (str(answer.body["state"]), int(write["used"]))
            people_limits[name] = int(write["limit"])
            stored = {c: int(n) for c, n in answer.body["streaks"].items()}
            # Refusals answered from the container's memory (issue 29) are counted in the
            # stored streak with the next refusal sent: stored plus deferred is the streak.
            tenant_id = self._container.settings.dev_tenant
            for c, n in self._container.checks.deferred_streaks(tenant_id, name).items():
                stored[c] = stored.get(c, 0) + n
            streaks[name] = dict(sorted(stored.items()))
        tenant = self._get("/v1/tenant")
        assert tenant.status == 200, tenant.describe()
        cats = tenant.body["categories"]
        return Observed(
            shown,
            limits,
            listing,
            people,
            people_limits,
            {c: int(v["used"]) for c, v in cats.items()},
            {c: int(v["limit"]) for c, v in cats.items()},
            self.outbox.escalations(),
            streaks,
        )
