"""Ours and the naive counter on dynalite behind bench/latency_proxy.py, which adds a fixed
delay to every DynamoDB request: the emulator's CPU cost plus a network round trip per
request, as on DynamoDB. Part of `make bench` (bench/run.py)."""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import workloads
from bench.latency_proxy import latency_proxy
from bench.moto_server import moto_server
from chalicelib.check.afterwards import settle_all

DELAYS_MS = (0, 2, 5, 10)
CLIENTS = (1, 8)
# Checks per client before the clock starts: opens the pool's connections and brings each
# session's last-calls record to its steady state (full: each check shifts it by one).
WARM_UP = 10
ROUNDS = 5

Checker = Callable[[int, int], bool]

# (implementation, kind of check, how to build its checker for a number of clients)
WORKLOADS: tuple[tuple[str, str, Callable[[workloads.Backend, int], Checker]], ...] = (
    ("ours", "allowed", lambda b, _: workloads.ours_checker(b)),
    ("naive", "allowed", lambda b, _: workloads.naive_checker(b)),
    ("atomic", "allowed", lambda b, _: workloads.atomic_checker(b)),
    ("ours", "allowed write", lambda b, _: workloads.ours_write_checker(b)),
    ("naive", "allowed write", lambda b, _: workloads.naive_write_checker(b)),
    ("ours", "refused", workloads.ours_refused_checker),
    ("naive", "refused", workloads.naive_refused_checker),
)
IMPLEMENTATIONS = ("ours", "naive", "atomic")
# "atomic": one conditional UpdateItem and nothing else (workloads.AtomicCounter), one
# client, reads only: the floor under any check made in one request.
FLOOR = "atomic"
# "allowed": reads (the session only); "allowed write": the session, then the principal and
# the tenant at once; "refused": writes of a session that used its budget.
KINDS = ("allowed", "allowed write", "refused")


def _child_cpu_seconds(name: str) -> float:
    """CPU time (user + system) used so far by this process's children named `name`
    (Linux /proc; 0 elsewhere)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[1]) == os.getpid() and name in (stat.parent / "cmdline").read_text():
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


@dataclass
class _Cell:
    """One workload at one client count, summed over the rounds at one delay."""

    impl: str
    kind: str
    clients: int
    checker: Checker
    samples: workloads.Samples
    requests: int = 0
    client_cpu_s: float = 0.0
    dynalite_cpu_s: float = 0.0
    held: Callable[[], None] | None = None  # records what runaway loops held back

    def run(self, log: workloads.RequestLog, per_client: int) -> None:
        log.take()
        cpu, emulator = time.process_time(), _child_cpu_seconds("dynalite")
        self.samples.add(workloads.sampled(self.checker, self.clients, per_client))
        # What this cell's checks left to do after their answers (admissions; repeats
        # refused from memory, recorded once their window ends) is this cell's cost, not
        # the cost of the cell whose check comes after it: done now and counted here.
        if self.held is not None:
            self.held()
        settle_all(10)
        self.client_cpu_s += time.process_time() - cpu
        self.dynalite_cpu_s += _child_cpu_seconds("dynalite") - emulator
        self.requests += sum(log.take().values())

    def as_json(self, delay: int) -> dict[str, Any]:
        timing = self.samples.timing()
        per_check = 1000 / timing.checks
        return {
            "delay_ms": delay,
            "impl": self.impl,
            "kind": self.kind,
            **timing.as_json(),
            "requests_per_check": round(self.requests / timing.checks, 2),
            "client_cpu_ms": round(self.client_cpu_s * per_check, 2),
            "dynalite_cpu_ms": round(self.dynalite_cpu_s * per_check, 2),
        }


def measure(dynalite: str, quick: bool) -> dict[str, Any]:
    """Every workload at every delay and client count, and over-admission at 8 clients.

    At each delay the workloads take turns for ROUNDS rounds, so a burst of load from
    elsewhere on the machine falls on all of them rather than on one.
    """
    per_round = {1: 8 if quick else 20, 8: 2 if quick else 5}  # checks per client
    runs = 2 if quick else 5
    rows: list[dict[str, Any]] = []
    over: dict[int, dict[str, list[int]]] = {}
    for delay in DELAYS_MS:
        with (
            latency_proxy(dynalite, delay) as endpoint,
            workloads.backend("dynalite", endpoint) as b,
            contextlib.redirect_stdout(io.StringIO()),  # the service's metrics (EMF)
        ):
            log = workloads.RequestLog(b.client, b.ours)
            held = b.container.checks.flush_held
            cells = [
                _Cell(
                    impl,
                    kind,
                    clients,
                    make(b, clients),
                    workloads.Samples(clients),
                    held=held if impl == "ours" else None,
                )
                for clients in CLIENTS
                for impl, kind, make in WORKLOADS
                if impl != FLOOR or clients == 1
            ]
            for cell in cells:
                workloads.sampled(cell.checker, cell.clients, WARM_UP)
            held()
            for _ in range(ROUNDS):
                for cell in cells:
                    cell.run(log, per_round[cell.clients])
            rows += [cell.as_json(delay) for cell in cells]
            over[delay] = workloads.over_admission(b, 8, runs, each=4)
    return {
        "delays_ms": list(DELAYS_MS),
        "rounds": ROUNDS,
        "rows": rows,
        "over_admission": {"clients": 8, "each": 4, "limit": workloads.WRITE_LIMIT, "runs": over},
    }


def measure_moto(quick: bool, zae: Callable[[str, int], dict[str, Any]]) -> dict[str, Any]:
    """Allowed checks of ours, naive and zae-limiter (run by `zae(endpoint, checks)`) on
    a moto server behind the proxy: the one backend here that runs all three."""
    per_client = 4 if quick else 8  # at 8 clients; twice that at 1, as zae_runner does
    rows: list[dict[str, Any]] = []
    errors: dict[int, str] = {}
    with moto_server() as moto:
        for delay in DELAYS_MS:
            with latency_proxy(moto, delay) as endpoint:
                with (
                    workloads.backend("moto", endpoint) as b,
                    contextlib.redirect_stdout(io.StringIO()),
                ):
                    for impl, make in (
                        ("ours", workloads.ours_checker),
                        ("naive", workloads.naive_checker),
                    ):
                        checker = make(b)
                        workloads.sampled(checker, 8, 2)
                        for clients in CLIENTS:
                            n = per_client * (2 if clients == 1 else 1)
                            timing = workloads.timed(checker, clients, n).as_json()
                            rows.append({"delay_ms": delay, "impl": impl, **timing})
                theirs = zae(endpoint, per_client)
                if theirs.get("ok"):
                    rows += [
                        {"delay_ms": delay, "impl": "zae-limiter", **t} for t in theirs["timings"]
                    ]
                else:
                    errors[delay] = str(theirs["error"])
    return {"delays_ms": list(DELAYS_MS), "rows": rows, "zae_errors": errors}


def moto_table(r: dict[str, Any]) -> list[str]:
    """The moto section's lines of Markdown."""
    lines = [
        "## zae-limiter beside ours: a moto server behind the same proxy (allowed checks)",
        "",
        "| added delay | clients | implementation | p50 ms | p99 ms | checks/s | "
        "checks/s vs ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for delay in r["delays_ms"]:
        for clients in CLIENTS:
            ours = _row(r, "ours", None, delay, clients)
            for impl in ("ours", "naive", "zae-limiter"):
                try:
                    t = _row(r, impl, None, delay, clients)
                except StopIteration:
                    lines.append(f"| +{delay} ms | {clients} | {impl} | n/a | n/a | n/a | n/a |")
                    continue
                ratio = t["checks_per_second"] / ours["checks_per_second"]
                lines.append(
                    f"| +{delay} ms | {clients} | {impl} | {t['p50_ms']:.2f} | {t['p99_ms']:.2f} "
                    f"| {t['checks_per_second']:.0f} | {ratio:.2f}x |"
                )
    for delay, error in r["zae_errors"].items():
        lines.append(f"zae-limiter at +{delay} ms: {error}")
    return lines


def _row(
    r: dict[str, Any], impl: str, kind: str | None, delay: int, clients: int
) -> dict[str, Any]:
    return next(
        x
        for x in r["rows"]
        if (x["impl"], x.get("kind"), x["delay_ms"], x["clients"]) == (impl, kind, delay, clients)
    )


def crossover(r: dict[str, Any], kind: str, clients: int) -> str:
    """The added delay at which ours first serves more checks/s than naive, interpolated
    linearly in time per check between the two measured delays around it."""
    delays = r["delays_ms"]

    def gap(d: int) -> float:  # naive's time per check minus ours (s); > 0: ours ahead
        ours, naive = _row(r, "ours", kind, d, clients), _row(r, "naive", kind, d, clients)
        return float(1 / naive["checks_per_second"] - 1 / ours["checks_per_second"])

    if gap(delays[0]) > 0:
        return f"ours is ahead already at {delays[0]} ms"
    for low, high in itertools.pairwise(delays):
        if gap(high) > 0:
            at = low + (high - low) * -gap(low) / (gap(high) - gap(low))
            return f"~{at:.1f} ms"
    return f"not reached by {delays[-1]} ms"


def model(r: dict[str, Any], impl: str, kind: str) -> tuple[float, float]:
    """One client's ms per check as local + requests x added delay: (local ms, requests).

    Requests per check are counted; the local part (client, proxy and emulator CPU, and
    waiting for the machine's other work) is the measured time per check minus the requests'
    added delay, averaged over the delays.
    """
    rows = [(d, _row(r, impl, kind, d, 1)) for d in r["delays_ms"]]
    requests = sum(x["requests_per_check"] for _, x in rows) / len(rows)
    local = [1000 / x["checks_per_second"] - x["requests_per_check"] * d for d, x in rows]
    return sum(local) / len(local), requests


def _reaches(ours: tuple[float, float], naive: tuple[float, float], target: float) -> str:
    """The added delay at which the model puts ours at `target` x naive's checks/s."""
    (local_o, req_o), (local_n, req_n) = ours, naive
    if req_n <= target * req_o:
        return "never"
    return f"{max(0.0, (target * local_o - local_n) / (req_n - target * req_o)):.0f} ms"


def table(r: dict[str, Any], zae_error: str | None) -> list[str]:
    """The section's lines of Markdown."""
    lines: list[str] = []
    add = lines.append
    add("## DynamoDB with a network: dynalite behind a proxy adding a delay to each request")
    add("")
    add("**Ours ÷ naive, checks/s** (above 1: ours serves more checks per second)")
    add("")
    add("| check | clients | " + " | ".join(f"+{d} ms" for d in r["delays_ms"]) + " | crossover |")
    add("|---|---|" + "---|" * (len(r["delays_ms"]) + 1))
    for kind in KINDS:
        for clients in CLIENTS:
            cells = []
            for delay in r["delays_ms"]:
                ours = _row(r, "ours", kind, delay, clients)["checks_per_second"]
                naive = _row(r, "naive", kind, delay, clients)["checks_per_second"]
                cells.append(f"{ours / naive:.2f}x")
            add(
                f"| {kind} | {clients} | " + " | ".join(cells) + f" | "
                f"{crossover(r, kind, clients)} |"
            )
    floor = [
        _row(r, FLOOR, "allowed", d, 1)["checks_per_second"]
        / _row(r, "naive", "allowed", d, 1)["checks_per_second"]
        for d in r["delays_ms"]
    ]
    add(
        "| allowed: one conditional UpdateItem and nothing else (the floor) ÷ naive | 1 | "
        + " | ".join(f"{x:.2f}x" for x in floor)
        + " | |"
    )
    add("")
    add(
        "| added delay | check | clients | implementation | p50 ms | p99 ms | checks/s | "
        "checks/s vs ours | requests / check | client CPU ms / check | dynalite CPU ms / check |"
    )
    add("|---|---|---|---|---|---|---|---|---|---|---|")
    for delay in r["delays_ms"]:
        for kind in KINDS:
            for clients in CLIENTS:
                ours = _row(r, "ours", kind, delay, clients)
                for impl in IMPLEMENTATIONS:
                    with contextlib.suppress(StopIteration):
                        t = _row(r, impl, kind, delay, clients)
                        ratio = t["checks_per_second"] / ours["checks_per_second"]
                        add(
                            f"| +{delay} ms | {kind} | {clients} | {impl} | {t['p50_ms']:.2f} | "
                            f"{t['p99_ms']:.2f} | {t['checks_per_second']:.0f} | {ratio:.2f}x | "
                            f"{t['requests_per_check']} | {t['client_cpu_ms']} | "
                            f"{t['dynalite_cpu_ms']} |"
                        )
    add("")
    add(
        "**Why, one client: ms per check = local + requests x added delay** (local: "
        "the mean time per check less its requests' added delay, averaged over the delays)"
    )
    add("")
    add(
        "| check | implementation | local ms | requests / check | ÷ naive as the "
        "delay grows | reaches 1.9x naive at |"
    )
    add("|---|---|---|---|---|---|")
    for kind in KINDS:
        naive = model(r, "naive", kind)
        for impl in IMPLEMENTATIONS:
            with contextlib.suppress(StopIteration):
                line = model(r, impl, kind)
                ceiling, reach = "", ""
                if impl != "naive" and line[1]:
                    ceiling = f"{naive[1] / line[1]:.2f}x"
                    reach = _reaches(line, naive, 1.9)
                add(f"| {kind} | {impl} | {line[0]:.1f} | {line[1]:.2f} | {ceiling} | {reach} |")
    if zae_error is not None:
        add("")
        add(f"zae-limiter: cannot run on dynalite ({zae_error})")
    o = r["over_admission"]
    add("")
    add(
        f"**Over-admission through the proxy**: {o['clients']} clients x {o['each']} writes "
        f"on one session, write limit {o['limit']}; allowed per run"
    )
    add("")
    add("| added delay | ours | naive |")
    add("|---|---|---|")
    for delay, counts in o["runs"].items():
        add(
            f"| +{delay} ms | {' '.join(map(str, counts['ours']))} | "
            f"{' '.join(map(str, counts['naive']))} |"
        )
    return lines
