"""AM recovery: the AM of a running local job is SIGKILLed RUNS times; each time the supervisor
starts the next attempt, which reads the journal and adopts every executor. Recovery = from the
moment the supervisor found the AM dead to the moment every executor had reported to the new one
(``am_attempts``). Baseline, in the same run: the same job's cold start (submit -> every trainer
running), what the job would pay again if an AM death restarted every executor (what the original
Primus did on a YARN AM retry). The last line is median recovery as a ratio of the cold start.

    python bench/am_recovery.py          # env: WORKERS (8), RUNS (5)
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

from primus_runtime.client import PrimusClient

WORKERS = int(os.environ.get("WORKERS", 8))
RUNS = int(os.environ.get("RUNS", 5))


def spec() -> dict[str, Any]:
    return {"name": "am-recovery",
            "roles": [{"name": "worker", "replicas": WORKERS,
                       "command": [sys.executable, "-c", "import time; time.sleep(3600)"]}],
            "am": {"max_attempts": RUNS + 1, "recovery_grace": "30s"}}


def wait(predicate: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.02)
    return value


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="primus-am-recovery-") as home:
        client = PrimusClient(home=home)
        started = time.monotonic()
        app = client.submit(spec())
        job = client.cluster("local").job(app)

        def all_running() -> bool:
            status = job.read_json(job.status) or {}
            return sum(e["state"] == "running" for e in status.get("executors", [])) == WORKERS
        wait(all_running, "every trainer running")
        cold = time.monotonic() - started
        pids = {e.id: e.pid for e in client.status(app).executors}
        recoveries = []
        for run in range(1, RUNS + 1):
            am = json.loads(job.am_info.read_text())["pid"]
            os.kill(am, signal.SIGKILL)

            def recovered(run: int = run) -> dict[str, Any] | None:
                attempts = (job.read_json(job.status) or {}).get("job", {}).get("am_attempts", [])
                return attempts[-1] if len(attempts) == run and attempts[-1].get("recovered_at") else None
            attempt = wait(recovered, f"AM attempt {run + 1} to recover")
            recoveries.append(attempt["recovered_at"] - attempt["down_since"])
            assert attempt["adopted"] == WORKERS, attempt
        kept = {e.id: e.pid for e in client.status(app).executors} == pids
        client.kill(app)
        client.wait(app, timeout=60)
    print(f"{WORKERS} executors, {RUNS} AM kills: recovery median {statistics.median(recoveries):.2f} s, "
          f"max {max(recoveries):.2f} s, every executor kept: {kept}; cold start {cold:.2f} s")
    print(f"AM recovery against a cold start of the same job: {statistics.median(recoveries) / cold:.2f}x")


if __name__ == "__main__":
    main()
