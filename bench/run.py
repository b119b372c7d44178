"""`make bench`: every figure of issue 6 in one run, printed as a table and written as JSON
to bench/results/latest.json. Figures are printed, never asserted.

    .venv/bin/python -m bench.run [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")  # before chalicelib builds its Logger

from bench import (
    cold_start,
    leases,
    mcp_overhead,
    network,
    proxy_overhead,
    refusal_storm,
    scope_cost,
    workloads,
    write_read,
)
from tests.support import dynalite_server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "latest.json"
RESULTS_MD = ROOT / "bench" / "RESULTS.md"
RESULTS_HEAD = """# Benchmark results

Written by `make bench` from one run (at most 6 minutes on 2 cores; `make bench
BENCH_ARGS=--quick` for a shorter run) at commit {commit}, on a machine whose 2 cores were
shared with other work: absolute figures are noisy, ratios from the same run less so.

The first section is the one that matters for DynamoDB: ours and the naive read-then-write
counter on dynalite behind bench/latency_proxy.py, which adds a fixed delay to every request
(DynamoDB in-region is a network round trip per request). The sections after it run on the
emulators with no network at all, where ours pays for the emulator evaluating its condition
expression in the same CPU and never gets back the round trip it saves: compare those rows
with each other, not with DynamoDB.

"""
ZAE_PYTHON = ROOT / "bench" / ".venv-zae" / "bin" / "python"
ZIP = ROOT / "build" / "prod" / "deployment.zip"


def quiet() -> contextlib.AbstractContextManager[Any]:
    """Swallow the metrics (EMF) the service prints to stdout while it is measured."""
    return contextlib.redirect_stdout(io.StringIO())


def zae(endpoint: str | None, checks: int) -> dict[str, Any]:
    """zae-limiter's figures from its own venv, or why it could not run."""
    if not ZAE_PYTHON.exists():
        return {"ok": False, "error": "bench/.venv-zae missing: run `make bench`"}
    command = [str(ZAE_PYTHON), "-m", "bench.zae_runner", "--checks", str(checks)]
    if endpoint is not None:
        command += ["--endpoint", endpoint]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    try:
        result: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        result = {"ok": False, "error": (done.stderr or done.stdout)[-300:]}
    return result


def measure(quick: bool) -> dict[str, Any]:
    # Trimmed (was 100 checks per client, 20 runs, 300 MCP calls, 10 cold starts) so the
    # whole run, network section included, fits in 6 minutes on 2 shared cores.
    per_client = 25 if quick else 50
    runs = 5 if quick else 10
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "budget": {"read": workloads.READ_LIMIT, "write": workloads.WRITE_LIMIT},
        "backends": {},
    }
    with dynalite_server() as dynalite:
        for name, endpoint in (("moto", None), ("dynalite", dynalite)):
            print(f"measuring on {name} ...", file=sys.stderr, flush=True)
            with workloads.backend(name, endpoint) as b, quiet():
                figures: dict[str, Any] = {
                    "cost": {
                        "ours": workloads.cost_of_ours(b, endpoint).as_json(),
                        "naive": workloads.cost_of_naive(b).as_json(),
                    },
                    "latency": {
                        "ours": [
                            workloads.timed(workloads.ours_checker(b), 1, per_client * 2).as_json(),
                            workloads.timed(workloads.ours_checker(b), 8, per_client).as_json(),
                        ],
                        "naive": [
                            workloads.timed(
                                workloads.naive_checker(b), 1, per_client * 2
                            ).as_json(),
                            workloads.timed(workloads.naive_checker(b), 8, per_client).as_json(),
                        ],
                    },
                }
                if endpoint is not None:
                    figures["over_admission"] = workloads.over_admission(b, 64, runs)
            figures["zae"] = zae(endpoint, per_client)
            out["backends"][name] = figures
        print("measuring through the latency proxy ...", file=sys.stderr, flush=True)
        out["network"] = network.measure(dynalite, quick)
        out["network_moto"] = network.measure_moto(quick, zae)
        out["write_read"] = write_read.measure(dynalite, quick)
        print("measuring the cost of each scope configuration ...", file=sys.stderr, flush=True)
        with quiet():
            out["scopes"] = scope_cost.measure_all()
        print("measuring the MCP round trip ...", file=sys.stderr, flush=True)
        out["mcp"] = mcp_overhead.measure(dynalite, calls=100 if quick else 200)
        print("measuring leased reads ...", file=sys.stderr, flush=True)
        out["leases"] = leases.measure(dynalite, runs=1 if quick else 3)
        print("measuring the refusal storm ...", file=sys.stderr, flush=True)
        out["refusal_storm"] = refusal_storm.measure(dynalite)
        print("measuring mcp-quota-proxy ...", file=sys.stderr, flush=True)
        out["proxy"] = proxy_overhead.measure(dynalite, calls=100 if quick else 150)
    print("measuring cold start ...", file=sys.stderr, flush=True)
    out["cold_start"] = cold_start.measure(ZIP, 5 if quick else 9)
    return out


# -- the table ---------------------------------------------------------------------------


def _ratio(theirs: float | None, ours: float | None) -> str:
    if not theirs or not ours:
        return "n/a"
    return f"{theirs / ours:.2f}x"


def _zae_on_dynalite(r: dict[str, Any]) -> str | None:
    """Why zae-limiter could not run on dynalite, or None if it did."""
    result = r["backends"]["dynalite"]["zae"]
    if result.get("ok"):
        return None
    error = str(result["error"])
    if "TransactWriteItems" in error:
        return (
            "its first acquire on a session creates the bucket with TransactWriteItems, "
            "which dynalite does not implement: UnknownOperationException"
        )
    return error


def table(r: dict[str, Any]) -> str:
    lines: list[str] = []
    add = lines.append
    add(f"mcp-quota benchmark (python {r['python']}, {r['machine']})")
    add("")
    lines += network.table(r["network"], _zae_on_dynalite(r))
    add("")
    lines += network.moto_table(r["network_moto"])
    add("")
    lines += write_read.table(r["write_read"])
    add("")
    add("## Cost per check by scope (issue 11): requests and write units")
    add("")
    add("```")
    lines += scope_cost.table(r["scopes"]).splitlines()
    add("```")
    add("")
    add("## Cost per check (DynamoDB requests counted from botocore's before-call events)")
    add("")
    add(
        "| backend | implementation | requests / allowed | requests / blocked | "
        "write units / allowed | write units / blocked | item bytes (max) |"
    )
    add("|---|---|---|---|---|---|---|")
    for name, b in r["backends"].items():
        rows = [("ours", b["cost"]["ours"]), ("naive read-then-write", b["cost"]["naive"])]
        if b["zae"].get("ok"):
            rows.append(("zae-limiter", b["zae"]["cost"]))
        for label, c in rows:
            ops_a = ", ".join(f"{k} {v}" for k, v in sorted(c["allowed_requests_by_op"].items()))
            ops_b = ", ".join(f"{k} {v}" for k, v in sorted(c["blocked_requests_by_op"].items()))
            add(
                f"| {name} | {label} | {c['requests_per_allowed']} ({ops_a} / "
                f"{c['allowed_checks']}) | {c['requests_per_blocked']} ({ops_b} / "
                f"{c['blocked_checks']}) | {c.get('wcu_per_allowed', 'n/a')} | "
                f"{c.get('wcu_per_blocked', 'n/a')} | {c['max_item_bytes']} |"
            )
        if not b["zae"].get("ok"):
            add(f"| {name} | zae-limiter | n/a | n/a | n/a | n/a | n/a |")
    add("")
    for name, b in r["backends"].items():
        split = b["cost"]["ours"].get("requests_per_allowed_by_category", {})
        add(
            f"Ours on {name}, requests per allowed check by category: "
            + ", ".join(f"{category} {value}" for category, value in split.items())
            + " (the bench policy gives writes a principal and a tenant budget beside the "
            "session's: one conditional update per budget; reads count against the session "
            "only)."
        )
    add("")
    add("## Emulators only, no network: latency and throughput in-process (allowed reads)")
    add("")
    add(
        "| backend | implementation | clients | p50 ms | p99 ms | checks/s | "
        "p50 vs ours | checks/s vs ours |"
    )
    add("|---|---|---|---|---|---|---|---|")
    for name, b in r["backends"].items():
        ours = b["latency"]["ours"]
        impls = [("ours", ours), ("naive read-then-write", b["latency"]["naive"])]
        if b["zae"].get("ok"):
            impls.append(("zae-limiter", b["zae"]["timings"]))
        for label, timings in impls:
            for mine, t in zip(ours, timings, strict=True):
                add(
                    f"| {name} | {label} | {t['clients']} | {t['p50_ms']:.2f} | "
                    f"{t['p99_ms']:.2f} | {t['checks_per_second']:.0f} | "
                    f"{_ratio(t['p50_ms'], mine['p50_ms'])} | "
                    f"{_ratio(t['checks_per_second'], mine['checks_per_second'])} |"
                )
        if not b["zae"].get("ok"):
            add(f"| {name} | zae-limiter | - | n/a | n/a | n/a | n/a | n/a |")
    for name, b in r["backends"].items():
        if not b["zae"].get("ok"):
            add("")
            add(f"zae-limiter on {name}: n/a, {b['zae']['error']}")
    add("")
    add("## Over-admission: 64 concurrent clients, write limit 15, on dynalite")
    add("")
    add("| implementation | runs | allowed min | allowed max | allowed mean | per run |")
    add("|---|---|---|---|---|---|")
    for label, counts in r["backends"]["dynalite"]["over_admission"].items():
        add(
            f"| {label} | {len(counts)} | {min(counts)} | {max(counts)} | "
            f"{statistics.mean(counts):.1f} | {' '.join(map(str, counts))} |"
        )
    m = r["mcp"]
    add("")
    add("## MCP tool call end to end (fastmcp client -> example server, loopback HTTP)")
    add("")
    add("| | calls | median ms | p99 ms |")
    add("|---|---|---|---|")
    add(
        f"| without the middleware | {m['without']['calls']} | {m['without']['median_ms']:.2f} "
        f"| {m['without']['p99_ms']:.2f} |"
    )
    add(
        f"| with the middleware | {m['with']['calls']} | {m['with']['median_ms']:.2f} | "
        f"{m['with']['p99_ms']:.2f} |"
    )
    add(f"| added per call | | {m['added_median_ms']:.2f} | {m['added_p99_ms']:.2f} |")
    add(
        f"| (one POST /v1/check straight to the service) | {m['direct_check']['calls']} | "
        f"{m['direct_check']['median_ms']:.2f} | {m['direct_check']['p99_ms']:.2f} |"
    )
    add(
        f"| (the same check through QuotaClient, the middleware's async client) | "
        f"{m['client_check']['calls']} | {m['client_check']['median_ms']:.2f} | "
        f"{m['client_check']['p99_ms']:.2f} |"
    )
    add("")
    add(
        f"Added per call beyond the middleware's own check round trip (p50): "
        f"{m['added_median_ms'] - m['client_check']['median_ms']:+.2f} ms; the middleware's "
        f"own work, measured alone against an in-memory transport: "
        f"{m['guard_cpu_us']:.0f} µs of CPU per call."
    )
    add(f"Quota service: {m['quota_backend']}.")
    if "leases" in r:
        lines += leases.table(r["leases"])
    if "refusal_storm" in r:
        lines += refusal_storm.table(r["refusal_storm"])
    if "proxy" in r:
        lines += proxy_overhead.table(r["proxy"])
    add("")
    lines += cold_start.table(r["cold_start"])
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer checks and runs")
    args = parser.parse_args()
    start = time.monotonic()
    results = measure(args.quick)
    results["seconds"] = round(time.monotonic() - start)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    text = table(results)
    print(text)
    if not args.quick:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        RESULTS_MD.write_text(
            RESULTS_HEAD.format(commit=commit or "unknown")
            + text
            + f"\n\nTotal: {results['seconds']} s of measuring.\n"
        )
        print(f"\nMarkdown: {RESULTS_MD.relative_to(ROOT)}")
    print(f"JSON: {RESULTS.relative_to(ROOT)}")
    print(f"Total: {results['seconds']} s (make bench's measurements, after installing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
