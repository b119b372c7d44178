"""What a runaway loop's refusals cost the store (issue 29, item 2): one session looping
on the service in-process on moto, at a fixed rate by a hand-moved clock, its DynamoDB
requests counted from botocore's `before-call` events over 100 refusals after the first
(steady state; `suspend_after_refusals` set high, so no suspension ends the loop).

    .venv/bin/python -m bench.runaway_loop
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tests.api.conftest import Api, running_api
from tests.api.test_scopes import POLICY, write
from tests.support import FixedClock, fake_aws_env

REFUSALS = 100
RATES = (1, 2, 4, 10, 100)  # calls a second


def per_refusal(api: Api, rate: int) -> tuple[float, Counter[str]]:
    """Requests per refused check, and by operation, for `REFUSALS` at `rate` a second."""
    session = f"loop-{rate}"
    assert [write(api, session).status_code for _ in range(3)] == [200] * 3
    assert write(api, session).status_code == 429  # the store's first refusal
    seen: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        seen[model.name] += 1

    events = api.container.dynamodb.meta.events
    events.register("before-call.dynamodb", count)
    try:
        for _ in range(REFUSALS):
            api.clock.advance(1 / rate)
            assert write(api, session).status_code == 429
    finally:
        events.unregister("before-call.dynamodb", count)
    return sum(seen.values()) / REFUSALS, seen


def main() -> None:
    fake_aws_env()
    with tempfile.TemporaryDirectory() as tmp:
        policy = Path(tmp) / "policy.json"
        policy.write_text(json.dumps({**POLICY, "suspend_after_refusals": 10_000}))
        for rate in RATES:
            with running_api(FixedClock(), "dynamodb", policy=str(policy)) as api:
                cost, ops = per_refusal(api, rate)
            print(f"{rate:>4}/s  {cost:.2f} requests/refusal  {dict(ops)}")


if __name__ == "__main__":
    main()
