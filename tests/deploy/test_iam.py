"""What the Lambda roles may do: exactly the calls the code makes, on this stack's
resources only. The required set is read from the code (see code_calls.py), so a new
boto3 call without a grant fails here, and so does a grant nothing uses."""

from __future__ import annotations

import ast
import inspect
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from chalicelib.schema import ALL_TABLES
from tests.deploy.code_calls import (
    ApiCall,
    api_calls,
    attribute_calls,
    lambda_entry_paths,
    relative,
    source_files,
)
from tests.deploy.conftest import Packaged

Grant = tuple[str, str]  # (IAM action, logical id of the resource)

API_HANDLER = "APIHandler"
AUTHORIZER = "Bearer"
NOTIFIER = "Notifier"
TOPIC = "AlertTopic"
QUEUE = "NotificationQueue"
LOG_ACTIONS = frozenset({"logs:CreateLogStream", "logs:PutLogEvents"})

# The whole grant, reviewed: a change here is a change to production permissions.
EXPECTED_ACTIONS = {
    API_HANDLER: {
        "cognito-idp:ListUserPoolClients",  # finds the sign-in client's id (deploy/sign_in.py)
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:Scan",
        "dynamodb:UpdateItem",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "secretsmanager:GetSecretValue",
        "sqs:SendMessage",
    },
    AUTHORIZER: {
        "cognito-idp:ListUserPoolClients",
        "dynamodb:GetItem",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
    },
    NOTIFIER: {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "sns:Publish",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "sqs:ReceiveMessage",
    },
}
# Not calls of our code: Lambda's event source mapping polls the queue with the
# notifier's role (SAM grants nothing when the role is given).
EVENT_SOURCE_GRANTS = {
    NOTIFIER: {
        ("sqs:ReceiveMessage", QUEUE),
        ("sqs:DeleteMessage", QUEUE),
        ("sqs:GetQueueAttributes", QUEUE),
    }
}
# Not read by the scan (a paginator of another service): wherever a caller is
# authenticated, the sign-in client's id is found in the stack's own user pool
# (`wiring.Container.cognito_client_id`).
SIGN_IN_GRANTS = {
    function: {("cognito-idp:ListUserPoolClients", "SignInUserPool")}
    for function in (API_HANDLER, AUTHORIZER)
}
# In a deployed stack the topic is published to by the notifier only: the API handler
# enqueues (`QueuedNotifier`); `Notifier.publish` is its path under `make run` alone.
PUBLISHED_BY = {("chalicelib/notify.py", "Notifier.publish"): NOTIFIER}

ADMIN_TOKEN_FUNCTIONS = {
    # Minting, revoking and listing tokens: the CLI (with the operator's own AWS
    # credentials, the root of trust) and the admin routes `/v1/tokens`, which only the
    # API handler serves. The authorizer only ever looks a token up.
    ("chalicelib/storage/dynamodb/tokens.py", "TokenStore.put"),
    ("chalicelib/storage/dynamodb/tokens.py", "TokenStore.revoke"),
    ("chalicelib/storage/dynamodb/tokens.py", "TokenStore.list"),
}
# The Lambda function that runs each kind of Chalice entry point (app.py, chalicelib/api/).
ENTRY_FUNCTION = {"authorizer": AUTHORIZER, "route": API_HANDLER, "on_sqs_message": NOTIFIER}
TOKENS_TABLE = "TokensTable"


def functions_that_authenticate() -> set[str]:
    """The functions whose entry code resolves tokens (`Authenticator.authenticate`):
    the authorizer, and the API handler when the authorizer let a request through
    unverified because the token store failed (`caller`)."""
    return {
        ENTRY_FUNCTION[kind]
        for kind, calls in lambda_entry_paths().items()
        if any(call.endswith("authenticator.authenticate") for call in calls)
    }


# Storage modules that act on another module's table: the principal and tenant budgets
# live in the counters table, and `updates.py` is the UpdateItem/GetItem helper of the
# counters-table adapters.
# The single use of emailed links is a small item in the counters table; the index of
# sessions in trouble and the approvals of single calls are partitions of the audit table.
SHARES_TABLE = {
    "approvals": "audit",
    "budgets": "counters",
    "updates": "counters",
    "links": "counters",
    "results": "counters",  # exactly-once writes: a kept call result per item
    "trouble": "audit",
}


def target_of(call: ApiCall) -> str:
    """The logical id of the resource a call acts on, from the module that makes it."""
    if call.service == "sns":
        return TOPIC
    if call.service == "sqs":
        return QUEUE
    if call.service == "secretsmanager":
        return "LinkSecret"
    stem = call.module.rsplit("/", 1)[-1].removesuffix(".py")
    stem = SHARES_TABLE.get(stem, stem)
    if call.module.startswith("chalicelib/storage/") and stem in ALL_TABLES:
        return ALL_TABLES[stem].logical_name
    raise AssertionError(
        f"{call.module}:{call.line} calls {call.action}, but which table it acts on is "
        "unknown: keep DynamoDB calls in chalicelib/storage/dynamodb/<table>.py"
    )


def imported_modules(path: Path) -> set[str]:
    """Dotted names of the modules a file imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def required_grants() -> dict[str, set[Grant]]:
    """Function -> the grants its code paths need: token look-ups wherever the entry code
    authenticates; token changes, every other table and the topic in the API handler."""
    required: dict[str, set[Grant]] = defaultdict(set)
    authenticating = functions_that_authenticate()
    for call in api_calls():
        target = target_of(call)
        if call.indexed:
            # A Query of an index needs the index's own ARN: every index the table has
            # (the scan cannot tell which one a call names), and not the table's.
            spec = next(t for t in ALL_TABLES.values() if t.logical_name == target)
            for index in spec.indexes:
                required[API_HANDLER].add((call.action, f"{target}/index/{index.name}"))
            continue
        looks_up = (call.module, call.function) not in ADMIN_TOKEN_FUNCTIONS
        publisher = PUBLISHED_BY.get((call.module, call.function))
        if publisher is not None:
            functions = {publisher}
        elif target == TOKENS_TABLE and looks_up:
            functions = authenticating
        else:
            functions = {API_HANDLER}
        for function in functions:
            required[function].add((call.action, target))
    for function, grants in (*EVENT_SOURCE_GRANTS.items(), *SIGN_IN_GRANTS.items()):
        required[function] |= grants
    return required


def resource_id(resource: Any) -> str:
    """The logical id a policy Resource points at; literal ARNs are not allowed."""
    assert isinstance(resource, dict), f"literal resource {resource!r}: use Fn::GetAtt/Ref"
    if "Fn::Sub" in resource:
        # One named secondary index of a table: "${Table.Arn}/index/<name>".
        match = re.fullmatch(r"\$\{(\w+)\.Arn\}/index/(\w+)", resource["Fn::Sub"])
        assert match is not None, resource
        return f"{match.group(1)}/index/{match.group(2)}"
    if "Fn::GetAtt" in resource:
        target, attribute = resource["Fn::GetAtt"]
        assert attribute == "Arn"
        return str(target)
    assert set(resource) == {"Ref"}, resource
    return str(resource["Ref"])


def statements_of_role(packaged: Packaged, role: str) -> list[dict[str, Any]]:
    """Every statement that applies to a role: inline policies and attached ones."""
    props = packaged.resources[role]["Properties"]
    assert "ManagedPolicyArns" not in props  # X-Ray is off in prod
    statements = [s for p in props.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    for resource in packaged.resources.values():
        if (
            resource["Type"] == "AWS::IAM::Policy"
            and {"Ref": role} in resource["Properties"]["Roles"]
        ):
            statements += resource["Properties"]["PolicyDocument"]["Statement"]
    return statements


def granted(packaged: Packaged) -> dict[str, set[Grant]]:
    """Function logical id -> (action, resource) pairs its role allows."""
    grants: dict[str, set[Grant]] = {}
    for name, resource in packaged.resources.items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        if "InlineCode" in resource["Properties"]:
            continue  # the deploy's pre-traffic hook, not the app: test_pre_traffic_hook_*
        role, _ = resource["Properties"]["Role"]["Fn::GetAtt"]
        pairs: set[Grant] = set()
        for statement in statements_of_role(packaged, role):
            assert statement["Effect"] == "Allow"
            assert set(statement) <= {"Sid", "Effect", "Action", "Resource"}, statement
            actions = statement["Action"]
            targets = statement["Resource"]
            actions = [actions] if isinstance(actions, str) else actions
            targets = targets if isinstance(targets, list) else [targets]
            pairs |= {(a, resource_id(t)) for a in actions for t in targets}
        grants[name] = pairs
    return grants


def test_exact_action_set_per_function(packaged: Packaged) -> None:
    grants = granted(packaged)
    assert {name: {a for a, _ in pairs} for name, pairs in grants.items()} == EXPECTED_ACTIONS


def test_no_wildcards_anywhere_in_the_lambda_policies(packaged: Packaged) -> None:
    for pairs in granted(packaged).values():
        for action, target in pairs:
            assert "*" not in action
            table, _, index = target.partition("/index/")
            assert table in packaged.resources, f"{action} on unknown resource {target}"
            if index:
                names = {i["IndexName"] for i in _indexes_of(packaged, table)}
                assert index in names, f"{action} on unknown index {target}"
    assert '"*"' not in json.dumps(
        [
            r
            for r in packaged.resources.values()
            if r["Type"] in ("AWS::IAM::Role", "AWS::IAM::Policy")
        ]
    )


def _indexes_of(packaged: Packaged, table: str) -> list[dict[str, Any]]:
    indexes: list[dict[str, Any]] = packaged.resources[table]["Properties"].get(
        "GlobalSecondaryIndexes", []
    )
    return indexes


def test_each_function_writes_only_its_own_log_group(packaged: Packaged) -> None:
    for name, pairs in granted(packaged).items():
        log_targets = {target for action, target in pairs if action in LOG_ACTIONS}
        assert log_targets == {f"{'ApiHandler' if name == API_HANDLER else name}LogGroup"}
        assert {a for a, t in pairs if t in log_targets} == LOG_ACTIONS


def test_every_call_the_code_makes_is_granted_and_nothing_more(packaged: Packaged) -> None:
    grants = granted(packaged)
    data = {name: {g for g in pairs if g[0] not in LOG_ACTIONS} for name, pairs in grants.items()}
    required = required_grants()
    missing = {name: sorted(required[name] - data.get(name, set())) for name in required}
    assert {k: v for k, v in missing.items() if v} == {}, (
        "calls without a grant: add them to .chalice/policy-prod*.json"
    )
    unused = {name: sorted(pairs - required.get(name, set())) for name, pairs in data.items()}
    assert {k: v for k, v in unused.items() if v} == {}, "grants no code uses: remove them"


def test_the_scan_sees_the_calls_we_know_about() -> None:
    found = {(c.module, c.function, c.action) for c in api_calls()}
    assert ("chalicelib/storage/dynamodb/updates.py", "update", "dynamodb:UpdateItem") in found
    assert ("chalicelib/storage/dynamodb/tokens.py", "TokenStore.get", "dynamodb:GetItem") in found
    # Every token-changing function still names a function that makes a call.
    assert {(m, f) for m, f, _ in found} >= ADMIN_TOKEN_FUNCTIONS


def test_the_handlers_fallback_authentication_is_covered_and_granted(
    packaged: Packaged,
) -> None:
    # On a token-store error the authorizer lets the request through unverified and the
    # handler authenticates again: in prod that needs a token look-up in the handler too.
    assert functions_that_authenticate() == {AUTHORIZER, API_HANDLER}
    grants = granted(packaged)
    assert ("dynamodb:GetItem", TOKENS_TABLE) in grants[API_HANDLER]
    # ... and on that table: the authorizer only looks tokens up.
    tokens = {name: {a for a, t in pairs if t == TOKENS_TABLE} for name, pairs in grants.items()}
    assert tokens[AUTHORIZER] == {"dynamodb:GetItem"}
    assert tokens[API_HANDLER] == {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:Scan",
    }


# The one module of the Lambda that mints, revokes and lists tokens: behind admin routes.
TOKEN_ADMIN = "chalicelib/admin/tokens.py"


@pytest.mark.parametrize("path", source_files())
def test_only_the_token_admin_mints_or_revokes_tokens(path: Path) -> None:
    """Token changes in the Lambda go through one module, which the routes reach only after
    `manager()`; no Lambda code imports the operator's CLI."""
    module = relative(path)
    if module in ("chalicelib/storage/dynamodb/tokens.py", TOKEN_ADMIN):
        return
    for imported in imported_modules(path):
        assert imported.split(".")[0] != "admin_cli", (module, imported)
    changing = {function.split(".")[-1] for _, function in ADMIN_TOKEN_FUNCTIONS}
    for receiver, method, line in attribute_calls(path):
        if "token" in receiver.lower() and receiver != "deps().token_admin":
            assert method not in changing, f"{module}:{line} {receiver}.{method}"


def view_sources() -> dict[str, str]:
    """Each route's view function (under its error wrapper) -> its source."""
    from app import app  # noqa: PLC0415

    return {
        entry.view_name: inspect.getsource(inspect.unwrap(entry.view_function))
        for methods in app.routes.values()
        for entry in methods.values()
    }


# How a route names the role it needs: the helpers of chalicelib/api/context.py, each of
# which asks `caller_may` first (the test below holds them to it).
FRESH_ADMIN_CALLS = ("operator_and_body(", "manager(", "manager_and_body(")
ADMIN_CALLS = (*FRESH_ADMIN_CALLS, "reader(", "reader_and_query(")
TOKEN_ADMIN_CALLS = ("manager(", "manager_and_body(")


def test_the_route_helpers_check_the_role_before_anything_else() -> None:
    from chalicelib.api import context  # noqa: PLC0415

    for helper, check in (
        (context.caller_and_body, "caller_may(request, permission)"),
        (context.reader_and_query, "caller_may(request, roles.Permission.READ)"),
        (context.reader, "caller_may(request, roles.Permission.READ)"),
        (context.operator_and_body, "caller_and_body(request, roles.Permission.ACT)"),
        (context.manager, "caller_may(request, roles.Permission.MANAGE)"),
        (context.manager_and_body, "caller_and_body(request, roles.Permission.MANAGE)"),
    ):
        body = [
            line.strip()
            for line in inspect.getsource(helper).split('"""')[-1].splitlines()
            if line.strip()
        ]
        assert check in body[0], helper.__name__


def test_every_token_admin_route_needs_an_admin() -> None:
    for name, source in view_sources().items():
        if "token_admin" in source:
            assert any(call in source for call in TOKEN_ADMIN_CALLS), name


CHANGING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Routes that change something without an admin token: checks, lease returns and kept
# call results (server tokens), and the emailed links (their own signature, single use).
NOT_ADMIN_CHANGES = frozenset({"check", "return_lease", "put_result", "perform_link"})


def test_every_admin_route_that_changes_anything_reads_the_token_afresh() -> None:
    """A revoked admin token must stop changing things at once: each changing route
    names the role it needs (`operator_and_body()`, `manager()`, `manager_and_body()`),
    which reads the token afresh past every cache (`context.caller`)."""
    from app import app  # noqa: PLC0415

    changing = {
        entry.view_name
        for methods in app.routes.values()
        for method, entry in methods.items()
        if method in CHANGING_METHODS
    }
    sources = view_sources()
    assert changing - NOT_ADMIN_CHANGES
    for name in sorted(changing - NOT_ADMIN_CHANGES):
        assert any(call in sources[name] for call in FRESH_ADMIN_CALLS), name


def test_pre_traffic_hook_may_invoke_the_new_versions_and_report_only(
    packaged: Packaged, deployed: dict[str, Any]
) -> None:
    """The deploy's hook (deploy/pre_traffic.py) runs with the one role it needs."""
    hook = packaged.resources["PreTrafficHook"]["Properties"]
    assert hook["Role"] == {"Fn::GetAtt": ["PreTrafficHookRole", "Arn"]}
    statements = statements_of_role(packaged, "PreTrafficHookRole")
    actions = {(s["Sid"], tuple(s["Action"])) for s in statements}
    assert actions == {
        ("InvokeTheNewVersions", ("lambda:InvokeFunction",)),
        ("ReportTheCheck", ("codedeploy:PutLifecycleEventHookExecutionStatus",)),
        ("WriteOwnLogGroup", ("logs:CreateLogStream", "logs:PutLogEvents")),
    }
    by_sid = {s["Sid"]: s["Resource"] for s in statements}
    assert by_sid["InvokeTheNewVersions"] == [
        {"Ref": "APIHandler.Version"},
        {"Ref": "Bearer.Version"},
    ]
    assert by_sid["WriteOwnLogGroup"] == [{"Fn::GetAtt": ["PreTrafficHookLogGroup", "Arn"]}]
    # Every name the report's ARNs use is a resource SAM makes of the template.
    for target in by_sid["ReportTheCheck"]:
        for name in re.findall(r"\$\{(\w+)\}", target["Fn::Sub"]):
            assert name in deployed["Resources"], name
    assert '"*"' not in json.dumps(statements)
