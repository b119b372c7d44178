"""Cold start of the packaged Lambda handler beside a bare Chalice+boto3 app packaged
the same way (`chalice package`), both answering their first check against dynalite.

    .venv/bin/python -m bench.cold_start [--zip build/prod/deployment.zip] [--runs 9]

Each run is a fresh interpreter on the unzipped package, as a new Lambda container:

- "init" is `import app` (the Lambda init phase);
- "first answered check" adds the first invocation of the handler with an API Gateway
  event for `POST /v1/check`: the client is built, the check's DynamoDB requests go out
  (the bare app's one UpdateItem; ours' UpdateItem, and on a container's first check of a
  principal its suspension and its tenant's grants, then cached 30 s), a 200 comes back.

The bare app is what a user would write instead: a Chalice route that builds its boto3
client on first use and makes one conditional `UpdateItem` on a counter. Both run on
this machine's Python with boto3 from the venv (Lambda's runtime provides boto3, already
byte-compiled); everything inside each zip runs from source, as on Lambda, where the code
directory is read-only and no bytecode is cached.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chalicelib.schema import ALL_TABLES  # noqa: E402
from tests.support import dynalite_server  # noqa: E402

ZIP = ROOT / "build" / "prod" / "deployment.zip"
BARE_TABLE = "bare-counters"

BARE_APP = f"""\
import boto3
from chalice import Chalice

app = Chalice(app_name="bare")
_dynamodb = None


@app.route("/v1/check", methods=["POST"])
def check():
    global _dynamodb
    if _dynamodb is None:
        _dynamodb = boto3.client("dynamodb")
    body = app.current_request.json_body
    _dynamodb.update_item(
        TableName="{BARE_TABLE}",
        Key={{"pk": {{"S": body["session_id"]}}}},
        UpdateExpression="ADD n :one",
        ConditionExpression="attribute_not_exists(n) OR n < :limit",
        ExpressionAttributeValues={{":one": {{"N": "1"}}, ":limit": {{"N": "200"}}}},
    )
    return {{"allowed": True}}
"""

BARE_CONFIG = {
    "version": "2.0",
    "app_name": "bare",
    "lambda_python_version": "python3.13",
    "stages": {"prod": {"api_gateway_stage": "api"}},
}

# A fresh interpreter: import the app, then hand its handler one API Gateway event.
PROBE = """\
import json, os, sys, time
t0 = time.perf_counter()
import app
t1 = time.perf_counter()
response = app.app(json.loads(sys.argv[1]), None)
t2 = time.perf_counter()
print(json.dumps({
    "init": (t1 - t0) * 1000,
    "first": (t2 - t0) * 1000,
    "status": response["statusCode"],
    # The modules imported from the package.
    "modules": sorted(m for m, module in sys.modules.items()
                      if (getattr(module, "__file__", None) or "").startswith(os.getcwd())),
}))
"""


def check_event(session_id: str) -> dict[str, Any]:
    """API Gateway's proxy event for one allowed check, after the authorizer passed it."""
    body = {"session_id": session_id, "tool": "search_articles", "category": "read"}
    return {
        "resource": "/v1/check",
        "path": "/v1/check",
        "httpMethod": "POST",
        "headers": {"content-type": "application/json", "host": "localhost"},
        "multiValueHeaders": {},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/v1/check",
            "httpMethod": "POST",
            "path": "/api/v1/check",
            "stage": "api",
            "requestId": f"cold-{session_id}",
            "authorizer": {
                "tenant": "bench",
                "role": "server",
                "token_id": "tok-bench",
                "name": "bench",
                "principals": "[]",
            },
        },
        "body": json.dumps(body),
        "isBase64Encoded": False,
    }


def package_bare(workdir: Path) -> Path:
    """`chalice package` the bare app, as `make package` packages ours; its zip."""
    project = workdir / "bare-project"
    (project / ".chalice").mkdir(parents=True)
    (project / "app.py").write_text(BARE_APP)
    (project / "requirements.txt").write_text("")
    (project / ".chalice" / "config.json").write_text(json.dumps(BARE_CONFIG))
    out = workdir / "bare-package"
    env = {**os.environ, "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
    chalice = Path(sys.executable).parent / "chalice"
    subprocess.run(
        [str(chalice), "package", "--stage", "prod", str(out)],
        cwd=project,
        env=env,
        check=True,
        capture_output=True,
    )
    return out / "deployment.zip"


def create_tables(endpoint: str) -> None:
    """Ours' tables under their default names, and the bare app's counter table."""
    client = boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    for kind, spec in ALL_TABLES.items():
        client.create_table(**spec.create_table_kwargs(f"mcp-quota-{kind}"))  # type: ignore[arg-type]
    client.create_table(
        TableName=BARE_TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def run_once(code_dir: Path, endpoint: str, session_id: str) -> dict[str, Any]:
    """One cold start: a fresh interpreter on `code_dir`, one check; its figures."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        # Lambda's runtime provides boto3; take it from this venv, after the code dir.
        "PYTHONPATH": os.pathsep.join([str(code_dir), *sys.path[1:]]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "QUOTA_STAGE": "prod",
        "POWERTOOLS_SERVICE_NAME": "mcp-quota",
    }
    event = json.dumps(check_event(session_id))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, event],
        cwd=code_dir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["status"] != 200:
        raise RuntimeError(f"{code_dir.name}: the first check answered {result['status']}")
    return result


@contextmanager
def unpacked(zip_path: Path) -> Iterator[tuple[Path, Path]]:
    """Ours and the bare app, each unzipped from its `chalice package` zip."""
    with tempfile.TemporaryDirectory() as tmp:
        service = Path(tmp) / "service"
        bare = Path(tmp) / "bare"
        with zipfile.ZipFile(zip_path) as archive:
            archive.extractall(service)
        with zipfile.ZipFile(package_bare(Path(tmp))) as archive:
            archive.extractall(bare)
        yield service, bare


def measure(zip_path: Path = ZIP, runs: int = 9) -> dict[str, Any]:
    """Medians of `runs` alternating cold starts of each app, and their ratios."""
    if not zip_path.exists():
        return {"error": f"{zip_path} missing: run `make package`"}
    samples: dict[str, dict[str, list[float]]] = {
        "ours": {"init": [], "first": []},
        "bare": {"init": [], "first": []},
    }
    modules: dict[str, list[str]] = {}
    with dynalite_server() as endpoint, unpacked(zip_path) as (service, bare):
        create_tables(endpoint)
        # One unmeasured start each warms the OS file cache alike.
        run_once(service, endpoint, "warm-ours")
        run_once(bare, endpoint, "warm-bare")
        for i in range(runs):
            for name, code_dir in (("ours", service), ("bare", bare)):
                result = run_once(code_dir, endpoint, f"{name}-{i}")
                samples[name]["init"].append(result["init"])
                samples[name]["first"].append(result["first"])
                modules[name] = result["modules"]
    medians = {
        name: {key: statistics.median(values) for key, values in kinds.items()}
        for name, kinds in samples.items()
    }
    ours, base = medians["ours"], medians["bare"]
    return {
        "service_init_ms": round(ours["init"], 1),
        "bare_init_ms": round(base["init"], 1),
        "init_ratio": round(ours["init"] / base["init"], 2),
        "service_first_ms": round(ours["first"], 1),
        "bare_first_ms": round(base["first"], 1),
        "first_ratio": round(ours["first"] / base["first"], 2),
        "package_bytes": zip_path.stat().st_size,
        "powertools_loaded": any(m.startswith("aws_lambda_powertools") for m in modules["ours"]),
        "modules_loaded": len(modules["ours"]),
        "bare_modules_loaded": len(modules["bare"]),
        "modules": modules["ours"],
        "runs": runs,
    }


def table(c: dict[str, Any]) -> list[str]:
    """The cold-start table of bench/RESULTS.md."""
    lines = [
        "## Cold start (bench/cold_start.py: fresh interpreters on each unzipped package, medians)",
        "",
    ]
    if "error" in c:
        return [*lines, f"n/a: {c['error']}"]
    lines += [
        "| | ours ms | bare Chalice+boto3 ms | ratio |",
        "|---|---|---|---|",
        f"| init (import app) | {c['service_init_ms']} | {c['bare_init_ms']} | "
        f"{c['init_ratio']}x |",
        f"| first answered check (init + handler + its DynamoDB requests) | "
        f"{c['service_first_ms']} | {c['bare_first_ms']} | {c['first_ratio']}x |",
        "",
        f"deployment.zip: {c['package_bytes'] / 1e6:.2f} MB; {c['runs']} runs each, "
        f"alternating. After its first check, ours has loaded {c['modules_loaded']} modules "
        f"from its package (Powertools: {'loaded' if c['powertools_loaded'] else 'not loaded'}"
        f"); the bare app {c['bare_modules_loaded']}.",
    ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description="Cold start of the packaged handler.")
    parser.add_argument("--zip", type=Path, default=ZIP)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    print("\n".join(table(measure(args.zip, args.runs))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
