"""`make run` as a user runs it in a terminal: its own process group, its log kept, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.http import call
from tests.support import ROOT, free_port

PYTHON = ROOT / ".venv" / "bin" / "python"
SERVE_LOCAL = ROOT / "scripts" / "serve_local.py"


@dataclass
class Runner:
    """A running `scripts/serve_local.py` and the file its output goes to."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def ctrl_c(self, timeout: float = 30.0) -> int:
        """SIGINT to the whole process group, as a terminal's Ctrl-C; returns the status."""
        os.killpg(self.process.pid, signal.SIGINT)
        return self.process.wait(timeout=timeout)


def _wait_healthy(runner: Runner, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if runner.process.poll() is not None:
            raise RuntimeError(f"make run exited early:\n{runner.output()[-3000:]}")
        try:
            if call(f"{runner.url}/health", token=None).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)  # polling for start-up, not synchronising a test
    raise TimeoutError(f"make run not healthy after {timeout}s:\n{runner.output()[-3000:]}")


@contextmanager
def make_run(log_dir: Path, extra_env: dict[str, str] | None = None) -> Iterator[Runner]:
    """Start the runner in a new process group with the environment `make run` gives it."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QUOTA_", "VERBOSE"))}
    env.pop("AWS_ENDPOINT_URL", None)
    env.update({"PORT": str(port), "PYTHONUNBUFFERED": "1", **(extra_env or {})})
    log = log_dir / f"make-run-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(PYTHON), str(SERVE_LOCAL)],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    runner = Runner(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait_healthy(runner)
        yield runner
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
