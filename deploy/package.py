"""`make package STAGE=prod`: the merge template, then `chalice package --merge-template`,
into one directory per release, `build/<stage>/<version>/`, holding `sam.json` and
`deployment.zip`; `build/<stage>/latest` names the newest, and a copy of it sits in
`build/<stage>/` itself. Earlier releases stay, so the
previous one can be deployed again (docs/operations.md, "Deploys and rollback"). Needs a
region, never credentials: nothing here talks to AWS."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chalicelib.quota.errors import ConfigurationError  # noqa: E402
from chalicelib.quota.policy import load_policy  # noqa: E402
from deploy.build_template import (  # noqa: E402
    app_function_names,
    build_merge_template,
    finish,
    load_config,
    stage_environments,
)

DEFAULT_REGION = "us-east-1"
MERGE_TEMPLATE = "merge-template.json"
# Dependencies of ours that Lambda's Python runtime already holds, byte-compiled, as
# boto3's own dependencies. A copy in the zip would come first on sys.path, shadow the
# runtime's, and be compiled from source at every cold start (bench/cold_start.py).
RUNTIME_PROVIDED = ("jmespath",)
LATEST = "latest"


def release_version(project_dir: Path = ROOT, now: datetime | None = None) -> str:
    """`<UTC time>-<commit>`, `-dirty` if the work tree has changes: sorts by time, and
    says which code a release holds."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    git = ["git", "-C", str(project_dir)]
    try:
        commit = subprocess.run(  # noqa: S603
            [*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        changes = subprocess.run(  # noqa: S603
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"{stamp}-nogit"
    return f"{stamp}-{commit}{'-dirty' if changes else ''}"


def prune_zip(zip_path: Path, provided: tuple[str, ...] = RUNTIME_PROVIDED) -> list[str]:
    """Rewrite `zip_path` without the packages in `provided` (and their dist-info) and
    without bytecode: `chalice package` copies any `__pycache__` the build machine wrote,
    compiled for its Python, not the runtime's. Returns the entries dropped."""

    def dropped(entry: str) -> bool:
        top = entry.split("/", 1)[0]
        if any(top == name or top.startswith(f"{name}-") for name in provided):
            return True
        return "__pycache__" in entry.split("/") or entry.endswith(".pyc")

    kept = zip_path.with_suffix(".tmp")
    gone: list[str] = []
    with zipfile.ZipFile(zip_path) as source, zipfile.ZipFile(kept, "w") as target:
        for info in source.infolist():
            if dropped(info.filename):
                gone.append(info.filename)
            else:
                target.writestr(info, source.read(info), compress_type=info.compress_type)
    kept.replace(zip_path)
    return gone


def check_policy(config: dict[str, Any], stage: str) -> None:
    """Refuse a stage whose quota policy cannot work, or would not be in the zip.

    Raises:
        SystemExit: one line naming the problem.
    """
    if stage not in config.get("stages", {}):
        return  # build_merge_template names the stages
    name = stage_environments(config, stage)[0].get("QUOTA_POLICY", "default.json")
    if "/" in name:
        raise SystemExit(
            f"stage {stage!r}: QUOTA_POLICY {name!r} must name a file in "
            "chalicelib/policies/: only those are in the zip"
        )
    try:
        load_policy(name)
    except ConfigurationError as exc:
        raise SystemExit(f"stage {stage!r}: {' '.join(str(exc).split())}") from exc


def package(stage: str, outdir: Path, project_dir: Path = ROOT) -> Path:
    """Package `stage` into `outdir` (replaced); returns the path of the SAM template.

    Raises:
        subprocess.CalledProcessError: `chalice package` failed.
        SystemExit: the stage cannot be packaged, e.g. it would accept the development
            tokens (QUOTA_DEV_TOKENS or QUOTA_STAGE=local in its environment), or its
            quota policy cannot work.
    """
    config = load_config(project_dir)
    check_policy(config, stage)
    template = build_merge_template(stage, config, app_function_names())
    outdir = outdir.resolve()
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.mkdir(parents=True)
    merge = outdir / MERGE_TEMPLATE
    merge.write_text(json.dumps(template, indent=2, sort_keys=True) + "\n")
    env = dict(os.environ)
    env.setdefault("AWS_DEFAULT_REGION", DEFAULT_REGION)
    chalice = Path(sys.executable).parent / "chalice"
    command = [str(chalice), "package", "--stage", stage, "--merge-template", str(merge)]
    subprocess.run([*command, str(outdir)], cwd=ROOT, env=env, check=True)  # noqa: S603
    prune_zip(outdir / "deployment.zip")
    sam = outdir / "sam.json"
    sam.write_text(json.dumps(finish(json.loads(sam.read_text())), indent=2) + "\n")
    return sam


def release(stage: str, releases: Path, version: str) -> Path:
    """Package `stage` as `releases/<version>/`, name it in `releases/latest`, and copy
    it to `releases/` itself (where bench and habits look); earlier versions are kept.
    Returns the path of the release's SAM template.

    Raises:
        subprocess.CalledProcessError: `chalice package` failed.
        SystemExit: the stage cannot be packaged.
    """
    sam = package(stage, releases / version)
    (releases / LATEST).write_text(version + "\n")
    for built in sorted(sam.parent.iterdir()):
        shutil.copy2(built, releases / built.name)
    return sam


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Package one stage for CloudFormation.")
    parser.add_argument("--stage", required=True)
    parser.add_argument(
        "--out", type=Path, help="output directory, replaced (default build/<stage>/<version>)"
    )
    args = parser.parse_args(argv)
    if args.out is not None:
        sam = package(args.stage, args.out)
    else:
        sam = release(args.stage, ROOT / "build" / args.stage, release_version())
    print(f"packaged {args.stage}: {sam} and {sam.parent / 'deployment.zip'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
