"""What a cold container loads: `import app` loads Chalice and the route modules only; an
allowed check loads the check path only (no Powertools, no admin side, no audit or
email); the first refusal loads the rest. Each case runs in a fresh interpreter, with the
handler invoked as Lambda invokes it (an API Gateway event), on DynamoDB (moto)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from bench.cold_start import check_event
from tests.deploy.code_calls import ROOT

PROBE = """\
import json, sys
from moto import mock_aws
mock_aws().start()
import app
loaded = lambda: sorted(
    m for m, module in sys.modules.items()
    if m.split(".")[0] in ("chalicelib", "aws_lambda_powertools")
)
report = {"init": loaded(), "statuses": []}
import boto3
from chalicelib.schema import ALL_TABLES
client = boto3.client("dynamodb")
for kind, spec in ALL_TABLES.items():
    client.create_table(**spec.create_table_kwargs(f"mcp-quota-{kind}"))
for event in json.loads(sys.argv[1]):
    report["statuses"].append(app.app(event, None)["statusCode"])
report["after"] = loaded()
print(json.dumps(report))
"""

ADMIN_SIDE = (
    "chalicelib.admin.actions",
    "chalicelib.admin.budgets",
    "chalicelib.admin.requests",
    "chalicelib.admin.tokens",
    "chalicelib.admin.views",
    "chalicelib.links.actions",
    "chalicelib.links.signing",
    "chalicelib.links.pages",
    "chalicelib.console_files",
)
ADMIN_SERVICES = (
    "chalicelib.admin.actions",
    "chalicelib.admin.budgets",
    "chalicelib.admin.tokens",
    "chalicelib.admin.views",
    "chalicelib.console_files",
)
REFUSAL_SIDE = ("chalicelib.check.alerts", "chalicelib.check.auditing", "chalicelib.notify")


def cold_container(events: list[dict[str, Any]], on_lambda: bool = False) -> dict[str, Any]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(ROOT),
        "QUOTA_STAGE": "prod",
        "QUOTA_TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:mcp-quota-alerts",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    if on_lambda:
        env["AWS_LAMBDA_FUNCTION_NAME"] = "mcp-quota-prod"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(events)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def write_event(session_id: str) -> dict[str, Any]:
    event = check_event(session_id)
    event["body"] = json.dumps({"session_id": session_id, "tool": "delete_tag"})
    return event


# The init phase registers every blueprint; each names the rest of chalicelib lazily.
# schemas.py holds types only: nothing imports it at run time.
API_MODULES = {
    f"chalicelib.api.{path.stem}"
    for path in (ROOT / "chalicelib" / "api").glob("*.py")
    if path.stem not in ("__init__", "schemas")
}


def test_init_loads_the_routes_and_nothing_else_of_ours() -> None:
    report = cold_container([])

    assert set(report["init"]) == {
        "chalicelib",
        "chalicelib.api",
        *API_MODULES,
        "chalicelib.lazy",
        "chalicelib.observability",
        "chalicelib.precompiled",
    }


def test_an_allowed_check_loads_neither_powertools_nor_the_admin_or_refusal_side() -> None:
    report = cold_container([check_event("s-allowed")])

    assert report["statuses"] == [200]
    after = set(report["after"])
    assert {
        "chalicelib.check.service",
        "chalicelib.quota.core",
        "chalicelib.check.requests",
    } <= after
    assert [m for m in after if m.startswith("aws_lambda_powertools")] == []
    assert after.isdisjoint(ADMIN_SIDE)
    assert after.isdisjoint(REFUSAL_SIDE)


def test_on_lambda_the_init_phase_loads_the_check_path_and_nothing_more() -> None:
    report = cold_container([check_event("s-warm")], on_lambda=True)

    assert report["statuses"] == [200]
    init = set(report["init"])
    assert {"chalicelib.check.service", "chalicelib.quota.core", "chalicelib.wiring"} <= init
    assert [m for m in init if m.startswith("aws_lambda_powertools")] == []
    assert init.isdisjoint(ADMIN_SIDE)
    assert init.isdisjoint(REFUSAL_SIDE)
    # The first allowed check finds its route's modules loaded already.
    after = set(report["after"])
    check_route = {"chalicelib.check.binding", "chalicelib.check.requests"}
    check_route |= {"chalicelib.check.deadline", "chalicelib.quota.answers"}
    assert check_route <= init
    assert [m for m in after - init if m.startswith("aws_lambda_powertools")] == []


def test_the_first_refusal_loads_the_audit_the_email_and_powertools() -> None:
    # The default policy allows 15 write calls per session: the 16th is refused.
    report = cold_container([write_event("s-loop") for _ in range(16)])

    assert report["statuses"] == [200] * 15 + [429]
    after = set(report["after"])
    assert set(REFUSAL_SIDE) <= after
    assert "aws_lambda_powertools.logging.logger" in after
    # The email's links render with the link pages' code; the admin services stay out.
    assert after.isdisjoint(ADMIN_SERVICES)


LOG_PROBE = """\
import logging, sys
import app
from chalicelib.observability import logger
logger.set_correlation_id("req-1")
logger.warning("tool call refused", extra={"tool": "delete_tag"})
print("handlers", len(logging.getLogger("mcp-quota").handlers), file=sys.stderr)
"""


def test_a_log_line_is_one_json_line_with_the_request_id_and_the_caller() -> None:
    # Chalice gives the logger named after the app (our service name) a plain-text
    # handler; once Powertools' logger exists, it alone writes.
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "QUOTA_STAGE": "prod"}
    done = subprocess.run(
        [sys.executable, "-c", LOG_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["level"] == "WARNING"
    assert line["message"] == "tool call refused"
    assert line["correlation_id"] == "req-1"
    assert line["tool"] == "delete_tag"
    assert line["location"].startswith("<module>:")  # the caller's line, not the wrapper's
    assert "handlers 1" in done.stderr


AUTHORIZER_PROBE = """\
import json, sys
import chalicelib.api.authorizer
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "chalicelib")))
"""


def test_the_authorizer_function_loads_its_own_module_not_the_routes() -> None:
    # Its Lambda handler is chalicelib.api.authorizer.bearer: app.py is never imported.
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT), "QUOTA_STAGE": "prod"}
    done = subprocess.run(
        [sys.executable, "-c", AUTHORIZER_PROBE],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )

    assert json.loads(done.stdout) == [
        "chalicelib",
        "chalicelib.api",
        "chalicelib.api.authorizer",
        "chalicelib.api.context",
        "chalicelib.api.deferred",
        "chalicelib.lazy",
        "chalicelib.observability",
        "chalicelib.precompiled",
    ]
