"""Cold start of the packaged Lambda handler beside a bare Chalice+boto3 app packaged
the same way (`chalice package`), both answering their first check against dynalite.

    .venv/bin/python -m bench.cold_start [--zip build/prod/deployment.zip] [--runs 9]

Each run is a fresh interpreter on the unzipped package, as a new Lambda container:

- "init" is `import app` (the Lambda init phase, with AWS_LAMBDA_FUNCTION_NAME set as
  there);
- "first answered check" adds the first invocation of the handler with an API Gateway
  event for `POST /v1/check`: the client is built, the check's DynamoDB requests go out
  (the bare app's one UpdateItem; ours' UpdateItem, and on a container's first check of a
  principal its suspension and its tenant's grants, then cached 30 s), a 200 comes back.

The bare app is what a user would write instead: a Chalice route that builds its boto3
client on first use and makes one conditional `UpdateItem` on a counter, packaged by
`chalice package` as it comes (source only). Both run on the Lambda runtime's Python
(`lambda_python_version`) when `--setup-runtime` has made bench/.venv-runtime (that Python
with boto3 byte-compiled, as Lambda's runtime provides it; `make bench` makes it), else on
this venv's Python, which ignores bytecode compiled for another version. No bytecode is
written while measuring: Lambda's code directory is read-only.
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
RUNTIME_VENV = ROOT / "bench" / ".venv-runtime"
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
    "python": sys.version.split()[0],
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


def runtime_python() -> str:
    """The interpreter to measure on: bench/.venv-runtime's if it was set up, else this
    one."""
    venv = RUNTIME_VENV / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def setup_runtime() -> Path:
    """bench/.venv-runtime: the Lambda runtime's Python with this venv's boto3, compiled
    as pip installs it.

    Raises:
        SystemExit: that Python is not on this machine.
        subprocess.CalledProcessError: the venv or pip failed.
    """
    from importlib.metadata import version  # noqa: PLC0415

    from deploy.build_template import load_config  # noqa: PLC0415
    from deploy.package import runtime_python as find_python  # noqa: PLC0415

    wanted = load_config()["lambda_python_version"]
    interpreter = find_python(wanted)
    if interpreter is None:
        raise SystemExit(f"no {wanted} on this machine (RUNTIME_PYTHON names one)")
    subprocess.run([interpreter, "-m", "venv", "--clear", str(RUNTIME_VENV)], check=True)
    pins = [f"{name}=={version(name)}" for name in ("boto3", "botocore")]
    pip = [str(RUNTIME_VENV / "bin" / "pip"), "install", "--quiet", *pins]
    subprocess.run(pip, check=True)
    return RUNTIME_VENV


def run_once(code_dir: Path, endpoint: str, session_id: str, python: str) -> dict[str, Any]:
    """One cold start: a fresh interpreter on `code_dir`, one check; its figures."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        # Lambda's runtime provides boto3: the interpreter's own, after the code dir.
        "PYTHONPATH": str(code_dir),
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint,
        "QUOTA_STAGE": "prod",
        "POWERTOOLS_SERVICE_NAME": "mcp-quota",
        # As on Lambda: ours' init phase then loads the check path (app.py).
        "AWS_LAMBDA_FUNCTION_NAME": "cold-start",
    }
    event = json.dumps(check_event(session_id))
    done = subprocess.run(
        [python, "-c", PROBE, event],
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


def measure(zip_path: Path = ZIP, runs: int = 9, python: str | None = None) -> dict[str, Any]:
    """Medians of `runs` alternating cold starts of each app, and their ratios."""
    python = python or runtime_python()
    if not zip_path.exists():
        return {"error": f"{zip_path} missing: run `make package`"}
    samples: dict[str, dict[str, list[float]]] = {
        "ours": {"init": [], "first": [], "invoke": []},
        "bare": {"init": [], "first": [], "invoke": []},
    }
    modules: dict[str, list[str]] = {}
    with dynalite_server() as endpoint, unpacked(zip_path) as (service, bare):
        create_tables(endpoint)
        # One unmeasured start each warms the OS file cache alike.
        on = run_once(service, endpoint, "warm-ours", python)["python"]
        run_once(bare, endpoint, "warm-bare", python)
        for i in range(runs):
            for name, code_dir in (("ours", service), ("bare", bare)):
                result = run_once(code_dir, endpoint, f"{name}-{i}", python)
                samples[name]["init"].append(result["init"])
                samples[name]["first"].append(result["first"])
                samples[name]["invoke"].append(result["first"] - result["init"])
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
        "service_invoke_ms": round(ours["invoke"], 1),
        "bare_invoke_ms": round(base["invoke"], 1),
        "invoke_ratio": round(ours["invoke"] / base["invoke"], 2),
        "package_bytes": zip_path.stat().st_size,
        "python": on,
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
        f"| its invocation alone (first answered check - init) | {c['service_invoke_ms']} | "
        f"{c['bare_invoke_ms']} | {c['invoke_ratio']}x |",
        "",
        f"deployment.zip: {c['package_bytes'] / 1e6:.2f} MB; {c['runs']} runs each, "
        f"alternating. After its first check, ours has loaded {c['modules_loaded']} modules "
        f"from its package (Powertools: {'loaded' if c['powertools_loaded'] else 'not loaded'}"
        f"); the bare app {c['bare_modules_loaded']}. Both on Python {c['python']}.",
    ]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description="Cold start of the packaged handler.")
    parser.add_argument("--zip", type=Path, default=ZIP)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--python", help="the interpreter (default: bench/.venv-runtime's)")
    parser.add_argument(
        "--setup-runtime", action="store_true", help="make bench/.venv-runtime, then measure"
    )
    args = parser.parse_args()
    if args.setup_runtime:
        setup_runtime()
    print("\n".join(table(measure(args.zip, args.runs, args.python))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
