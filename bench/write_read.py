"""An allowed write beside an allowed read, one client, at +20 ms per store request (issue
29's measure: write p50 over read p50, at most 1.3x), with and without a call id, beside
the naive counter's. Part of `make bench` (bench/run.py), or alone:

    .venv/bin/python -m bench.write_read [--quick]

At +20 ms the round trips dominate: a check that waits for one round trip takes about
20 ms, one that waits for two about 40 ms, whatever the CPU does. A write's call id is
admitted after its answer (`check.afterwards`): the next check does not wait for it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from collections.abc import Callable
from typing import Any

from bench import workloads
from bench.latency_proxy import latency_proxy
from chalicelib.check.afterwards import settle_all
from tests.support import dynalite_server

DELAY_MS = 20
ROUNDS = 3

# (row name, how to build its checker)
CHECKS: tuple[tuple[str, Callable[[workloads.Backend], Callable[[int, int], bool]]], ...] = (
    ("ours, read", workloads.ours_checker),
    ("ours, write with a call id", workloads.ours_write_checker),
    ("ours, write without a call id", lambda b: workloads.ours_write_checker(b, False)),
    ("naive, read", workloads.naive_checker),
    ("naive, write", workloads.naive_write_checker),
)


def measure(dynalite: str, quick: bool) -> dict[str, Any]:
    """p50 and requests per check of each row, the rows taking turns for ROUNDS rounds."""
    per_round = 5 if quick else 15
    rows: dict[str, dict[str, Any]] = {}
    with (
        latency_proxy(dynalite, DELAY_MS) as endpoint,
        workloads.backend("dynalite", endpoint) as b,
        contextlib.redirect_stdout(io.StringIO()),  # the service's metrics (EMF)
    ):
        log = workloads.RequestLog(b.client, b.ours)
        checkers = [(name, make(b), workloads.Samples(1)) for name, make in CHECKS]
        requests: dict[str, int] = {}
        for _, checker, _ in checkers:
            workloads.sampled(checker, 1, 2)  # opens the connections
        for _ in range(ROUNDS):
            for name, checker, samples in checkers:
                log.take()
                samples.add(workloads.sampled(checker, 1, per_round))
                settle_all(10)  # the last admission's requests belong to this row
                requests[name] = requests.get(name, 0) + sum(log.take().values())
        for name, _, samples in checkers:
            timing = samples.timing()
            rows[name] = {
                "p50_ms": round(timing.p50_ms, 2),
                "p99_ms": round(timing.p99_ms, 2),
                "requests_per_check": round(requests[name] / timing.checks, 2),
            }
    return {"delay_ms": DELAY_MS, "rows": rows}


def table(r: dict[str, Any]) -> list[str]:
    """The section's lines of Markdown."""
    rows = r["rows"]
    read = rows["ours, read"]["p50_ms"]
    lines = [
        f"## An allowed write beside an allowed read: one client, +{r['delay_ms']} ms per "
        "store request (bench/write_read.py)",
        "",
        "| check | p50 ms | p99 ms | requests / check | p50 ÷ ours' read p50 |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | "
            f"{row['requests_per_check']} | {row['p50_ms'] / read:.2f}x |"
        )
    lines += [
        "",
        "Target (issue 29): an allowed write's p50 at most 1.3x an allowed read's. The "
        "session and the wider budgets are counted in one round trip; a call id is "
        "admitted after the answer, which does not wait for it (a copy is answered as a "
        "duplicate only of an admitted call). Its request is in requests / check; the "
        "next check may overlap it.",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer checks")
    args = parser.parse_args()
    with dynalite_server() as dynalite:
        print("\n".join(table(measure(dynalite, args.quick))))


if __name__ == "__main__":
    main()
