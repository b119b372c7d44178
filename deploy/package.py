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
import tempfile
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
# boto3's own dependencies. A copy in the zip would come first on sys.path and shadow the
# runtime's, which may be a newer version (bench/cold_start.py).
RUNTIME_PROVIDED = ("jmespath",)
LATEST = "latest"
# Bytecode checked against its source's hash, not its modification time: unzipping need
# not keep the times, and a source changed after packaging is compiled afresh.
INVALIDATION = "checked-hash"


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
    compiled for its Python, not the runtime's (`compile_zip` adds the runtime's).
    Returns the entries dropped."""

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


def runtime_python(version: str) -> str | None:
    """An interpreter of the Lambda runtime's Python (`python3.13`): RUNTIME_PYTHON, this
    one, one on PATH or one pyenv installed, the first that is that version; None if
    there is none here."""
    tag = "cpython-" + version.removeprefix("python").replace(".", "")
    if sys.implementation.cache_tag == tag and "RUNTIME_PYTHON" not in os.environ:
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    minor = version.removeprefix("python")
    candidates = [os.environ.get("RUNTIME_PYTHON"), shutil.which(version)]
    candidates += [str(p) for p in sorted(pyenv.glob(f"{minor}.*/bin/{version}"), reverse=True)]
    for candidate in filter(None, candidates):
        probe = [candidate, "-c", "import sys; print(sys.implementation.cache_tag)"]
        try:
            said = subprocess.run(probe, capture_output=True, text=True, check=False)  # noqa: S603
        except OSError:
            continue
        if said.returncode == 0 and said.stdout.strip() == tag:
            return candidate
    return None


def compile_zip(zip_path: Path, interpreter: str) -> list[str]:
    """Add to `zip_path` the bytecode of each of its modules, compiled by `interpreter`
    (the runtime's Python): Lambda's code directory is read-only, so a module shipped as
    source alone is compiled again at every cold start. Returns the entries added.

    Raises:
        subprocess.CalledProcessError: a module does not compile.
    """
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        with zipfile.ZipFile(zip_path) as archive:
            archive.extractall(tree)
        command = [interpreter, "-m", "compileall", "-q", "-s", str(tree)]
        command += ["--invalidation-mode", INVALIDATION, str(tree)]
        subprocess.run(command, check=True, capture_output=True)  # noqa: S603
        precompile_dataclasses(tree, interpreter)
        added = sorted(
            p.relative_to(tree).as_posix()
            for pattern in ("__pycache__/*.pyc", "__pycache__/dataclasses.*.bin")
            for p in tree.rglob(pattern)
        )
        with zipfile.ZipFile(zip_path, "a", zipfile.ZIP_DEFLATED) as archive:
            for name in added:
                archive.write(tree / name, name)
    return added


# Run by the runtime's Python in the unzipped package (`precompile_dataclasses`).
RECORD_DATACLASSES = """
import sys
from pathlib import Path
from chalicelib import precompiled
names = sorted(
    ".".join(p.with_suffix("").parts).removesuffix(".__init__")
    for p in Path("chalicelib").rglob("*.py")
)
count, failed = precompiled.write(names)
print(count, " ".join(failed))
"""


def as_on_lambda(tree: Path) -> dict[str, str]:
    """The environment in which the runtime's Python imports the unzipped package `tree`
    as Lambda would: the package first, then this venv's boto3 and botocore (pure Python;
    the runtime provides its own), writing no bytecode (the zip's is compileall's)."""
    import boto3  # noqa: PLC0415
    import botocore  # noqa: PLC0415

    provided = {str(Path(module.__file__ or "").parent.parent) for module in (boto3, botocore)}
    return {
        "PYTHONPATH": os.pathsep.join([str(tree), *sorted(provided)]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def precompile_dataclasses(tree: Path, interpreter: str) -> None:
    """Ship the package's dataclass methods compiled by `interpreter` (`chalicelib.precompiled`,
    a cold start's largest cost of ours): it imports every module of the unzipped package,
    with this venv's boto3 (pure Python; the runtime provides its own) after the package on
    its path. A module it cannot import is compiled at start-up as before (warned here).

    Raises:
        subprocess.CalledProcessError: the recording failed.
    """
    env = {**os.environ, **as_on_lambda(tree)}
    env.setdefault("AWS_DEFAULT_REGION", DEFAULT_REGION)
    done = subprocess.run(  # noqa: S603
        [interpreter, "-c", RECORD_DATACLASSES],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    count, _, failed = done.stdout.strip().partition(" ")
    if failed:
        print(f"warning: dataclasses compiled at start-up in: {failed}", file=sys.stderr)
    if count == "0":
        print("warning: no dataclass methods recorded", file=sys.stderr)


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
    runtime = config["lambda_python_version"]
    interpreter = runtime_python(runtime)
    if interpreter is None:
        print(
            f"warning: no {runtime} here (RUNTIME_PYTHON names one): deployment.zip ships "
            "source only, compiled at every cold start",
            file=sys.stderr,
        )
    else:
        compile_zip(outdir / "deployment.zip", interpreter)
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
