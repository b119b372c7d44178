"""Cold import time of the packaged Lambda handler beside a bare Chalice+boto3 app.

Unzips build/<stage>/deployment.zip (run `make package` first), then times fresh
interpreters, several runs each, and prints the medians and the zip size:

    .venv/bin/python bench/cold_start.py [--zip build/prod/deployment.zip] [--runs 15]

"init" is `import app` (the Lambda init phase). "first check ready" adds what the first
request builds lazily: settings, the policy, and the DynamoDB client (no network).
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BARE_APP = """\
import boto3
from chalice import Chalice

app = Chalice(app_name="bare")


@app.route("/")
def index():
    return {"ok": True}
"""

PROBE = """\
import json, sys, time
t0 = time.perf_counter()
import app
t1 = time.perf_counter()
if sys.argv[1] == "service":
    c = app.deps()
    c.settings, c.policy, c.dynamodb, c.checks
else:
    import boto3
    boto3.client("dynamodb")
t2 = time.perf_counter()
print(json.dumps({"init": (t1 - t0) * 1000, "ready": (t2 - t0) * 1000}))
"""


def time_runs(code_dir: Path, kind: str, runs: int) -> dict[str, float]:
    """Median milliseconds of `import app` and of the first-check set-up, fresh each run."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        # Lambda's runtime provides boto3; take it from this venv, after the code dir.
        "PYTHONPATH": os.pathsep.join([str(code_dir), *sys.path[1:]]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "QUOTA_STAGE": "prod",
        "POWERTOOLS_SERVICE_NAME": "mcp-quota",
    }
    samples: dict[str, list[float]] = {"init": [], "ready": []}
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE, kind],
            cwd=code_dir,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for key, value in json.loads(out).items():
            samples[key].append(value)
    return {key: statistics.median(values) for key, values in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description="Cold import time of the packaged handler.")
    parser.add_argument("--zip", type=Path, default=ROOT / "build" / "prod" / "deployment.zip")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        service = Path(tmp) / "service"
        bare = Path(tmp) / "bare"
        with zipfile.ZipFile(args.zip) as archive:
            archive.extractall(service)
            # The bare app gets the same vendored Chalice runtime the package carries.
            for name in archive.namelist():
                if name.startswith("chalice/"):
                    archive.extract(name, bare)
        (bare / "app.py").write_text(BARE_APP)
        # Warm the OS file cache once so every measured run reads from memory alike.
        time_runs(service, "service", 1)
        time_runs(bare, "bare", 1)
        results = {
            "service": time_runs(service, "service", args.runs),
            "bare": time_runs(bare, "bare", args.runs),
        }
    size = args.zip.stat().st_size
    print(f"deployment.zip: {size / 1e6:.2f} MB ({size} bytes); medians of {args.runs} runs")
    print(f"python {sys.version.split()[0]}")
    for name, result in results.items():
        print(
            f"  {name:8s} init (import app) {result['init']:7.1f} ms   "
            f"first check ready {result['ready']:7.1f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
