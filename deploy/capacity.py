"""The API handler's reserved concurrency: from a method's steady rate times the p99
duration of a check, with headroom, never from the burst (Little's law: executions in
flight = arrivals a second x seconds each). docs/operations.md, "Capacity and account
limits", gives the formula and the figures.

CloudFormation has no arithmetic, so the rate and the p99 are parameters with allowed
values, and the reservation of every allowed pair is rendered into a mapping here: it
follows the parameters at deploy time and cannot drift from them.
"""

from __future__ import annotations

import math
from typing import Any

Template = dict[str, Any]

RATE_PARAMETER = "ApiThrottleRateLimit"
P99_PARAMETER = "CheckP99Ms"
MAPPING = "ApiReservedConcurrency"
# API Gateway's default account throttle is 10,000 requests/s per region.
RATES = (10, 20, 50, 100, 150, 200, 300, 400, 500, 750, 1000, 1500, 2000, 3000, 5000, 7500, 10000)
DEFAULT_RATE = 200
P99_MS = (25, 50, 100, 150, 200, 300, 500, 750, 1000)
# bench/RESULTS.md: the slowest check measured through a network, an allowed write (three
# conditional updates) with 8 clients and 10 ms added to each store request, has a p99 of
# 88 ms; rounded up to the next allowed value.
DEFAULT_P99_MS = 100
HEADROOM = 2
# Admin and console routes share the reservation, and a cold container's first check
# takes about 0.4 s: a small stage still gets a few executions.
FLOOR = 10


def reserved_concurrency(rate: int, p99_ms: int) -> int:
    """Executions to reserve for `rate` checks a second that each take `p99_ms`."""
    return max(FLOOR, math.ceil(rate * p99_ms * HEADROOM / 1000))


def parameters() -> Template:
    """The method's steady rate and the p99 of a check, each from its allowed values."""
    return {
        RATE_PARAMETER: {
            "Type": "Number",
            "Default": DEFAULT_RATE,
            "AllowedValues": list(RATES),
            "Description": (
                "API Gateway steady-state requests per second, per method (each route and "
                "method has its own bucket of this size); sizes the API handler's "
                "reservation with CheckP99Ms."
            ),
        },
        P99_PARAMETER: {
            "Type": "Number",
            "Default": DEFAULT_P99_MS,
            "AllowedValues": list(P99_MS),
            "Description": (
                "The API handler's p99 Duration (ms; the dashboard shows it). With "
                "ReserveApiConcurrency, it reserves ceil(ApiThrottleRateLimit x "
                f"CheckP99Ms / 1000 x {HEADROOM}) executions, at least {FLOOR}."
            ),
        },
    }


def mappings() -> Template:
    """The reservation of every allowed rate and p99."""
    return {
        MAPPING: {
            str(rate): {str(p99): reserved_concurrency(rate, p99) for p99 in P99_MS}
            for rate in RATES
        }
    }


def reservation() -> Template:
    """The reservation of the stack's rate and p99, as CloudFormation looks it up."""
    return {"Fn::FindInMap": [MAPPING, {"Ref": RATE_PARAMETER}, {"Ref": P99_PARAMETER}]}
