"""What Airflow adds to a Primus job's start and stop, with a real scheduler, triggerer and API.

Starts the Airflow components (tests/provider/live_airflow.py: scheduler, dag-processor,
triggerer, api-server on SQLite with the LocalExecutor) and, RUNS times:

  (a) task start -> job running: a DAG run of ``primus_live_deferred`` (tests/provider/live_dags:
      2 workers running ``sleep 600``, deferrable) is triggered through the REST API; from the
      task instance's ``start_date`` to the time the Primus job recorded its ``running`` event
      (each run's line also shows it from the POST of the DAG run, scheduling included).
      Baseline: ``PrimusClient.submit`` of the same spec (the task's rendered ``spec`` field, read
      from the API), from the call to the job's ``running`` event.
  (b) mark failed -> job killed: once the trigger watches the running job (its progress line is
      in the task log), the task instance is PATCHed to ``failed`` as the UI's "Mark as failed"
      does; from that request to the job's ``killed`` event (the trigger's ``on_kill`` stops it).
      Baseline: ``PrimusClient.kill`` of the directly submitted job, from the call to its
      ``killed`` event.

Both sides use the job's own event times (wall clock, same machine). One warm-up round is not
counted. Prints each run (with the part of (b) until the trigger's ``on_kill`` started, from the
task log's timestamps) and the medians; the last line holds both ratios. Airflow start-up
(~15-30 s) is not measured.

    python bench/airflow_latency.py
"""

from __future__ import annotations

import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "provider")]  # tests/conftest.py is `conftest`
from live_airflow import LiveAirflow  # noqa: E402

from conftest import wait_for  # noqa: E402
from primus_runtime.client import PrimusClient  # noqa: E402
from primus_runtime.models import StatusDocument  # noqa: E402

RUNS = int(os.environ.get("RUNS", 3))
DAG_ID = "primus_live_deferred"
ACTIVE = ("pending", "starting", "running")


def event_time(status: StatusDocument, state: str) -> float | None:
    """When the job entered ``state``, by its own event log."""
    for event in status.events:
        if event.subject == "job" and event.to_state == state:
            return float(event.time)
    return None


def wait_state(client: PrimusClient, app_id: str, states: tuple[str, ...], timeout: float = 120.0) -> StatusDocument:
    def reached() -> StatusDocument | None:
        status = client.status(app_id)
        return status if status.job.state in states else None
    return wait_for(reached, timeout, f"job {app_id} to be {'/'.join(states)}", poll=0.05)


def when(status: StatusDocument, state: str, seen: float) -> float:
    """The job's event time for ``state``, else when the poll saw it (an evicted event)."""
    at = event_time(status, state)
    return at if at is not None else seen


def iso_time(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class AirflowRun:
    """One DAG run's figures, in seconds."""

    def __init__(self, live: LiveAirflow, client: PrimusClient):
        triggered = time.time()
        self.run_id = run_id = live.trigger_dag(DAG_ID)
        ti = live.wait_for_task_state(DAG_ID, run_id, "train", ("deferred", "failed", "success"))
        if ti["state"] != "deferred":
            raise RuntimeError(f"task is {ti['state']}, not deferred:\n{live.report(DAG_ID)}")
        self.spec: dict[str, Any] = ti["rendered_fields"]["spec"]  # what the task submitted
        tags = {"dag_id": DAG_ID, "task_id": "train", "run_id": run_id, "map_index": "-1"}
        (job,) = wait_for(lambda: client.list(tags), 60, "the task's Primus job")
        app_id = job.app_id
        running = when(wait_state(client, app_id, ("running",)), "running", time.time())
        self.start_to_running = running - iso_time(ti["start_date"])
        self.trigger_to_running = running - triggered  # what a user waits for, scheduling included

        wait_for(lambda: f"Primus job {app_id} running" in live.task_log(DAG_ID, run_id, "train", 1), 60,
                   "the trigger to watch the job", poll=0.5)
        marked = time.time()
        live.set_task_state(DAG_ID, run_id, "train", "failed")
        status = wait_state(client, app_id, ("succeeded", "failed", "killed", "lost"))
        if status.job.state != "killed":
            raise RuntimeError(f"job {app_id} ended {status.job.state}, not killed")
        self.failed_to_killed = when(status, "killed", time.time()) - marked
        live.wait_for_run_state(DAG_ID, run_id)
        # Where the time goes: the triggerer has to notice that the trigger is no longer wanted.
        on_kill = [iso_time(record["timestamp"]) for record in live.task_log_records(DAG_ID, run_id, "train", 1)
                   if str(record.get("event", "")).startswith("Deferred task killed") and record.get("timestamp")]
        self.failed_to_on_kill = on_kill[0] - marked if on_kill else None


def directly(client: PrimusClient, spec: dict[str, Any]) -> tuple[float, float]:
    """(submit -> running, kill -> killed) in seconds for the same spec, without Airflow."""
    submitted = time.time()
    app_id = client.submit(spec)
    status = wait_state(client, app_id, ("running",))
    submit_to_running = when(status, "running", time.time()) - submitted
    asked = time.time()
    status = client.kill(app_id, reason="benchmark")
    if status.job.state != "killed":
        raise RuntimeError(f"job {app_id} ended {status.job.state}, not killed")
    return submit_to_running, when(status, "killed", time.time()) - asked


def median_s(values: list[float]) -> str:
    median = statistics.median(values)
    return f"{median:.2f} s" if median >= 0.1 else f"{median * 1000:.0f} ms"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-airflow-") as tmp:
        live = LiveAirflow(Path(tmp))
        began = time.monotonic()
        live.start()
        try:
            live.wait_for_dag(DAG_ID)
            print(f"Airflow up and the DAG parsed in {time.monotonic() - began:.1f} s", flush=True)
            client = PrimusClient(live.primus_home)
            # Warm-up, not counted: builds the runtime bundle, starts a LocalExecutor worker, imports
            # the provider in the triggerer, fills the page cache (the first task start takes ~4 s more).
            directly(client, AirflowRun(live, client).spec)
            a_air, a_direct, b_air, b_direct = [], [], [], []
            for run in range(RUNS):
                air = AirflowRun(live, client)
                submit_to_running, kill_to_killed = directly(client, air.spec)
                a_air.append(air.start_to_running)
                b_air.append(air.failed_to_killed)
                a_direct.append(submit_to_running)
                b_direct.append(kill_to_killed)
                on_kill = f"{air.failed_to_on_kill:.3f} s" if air.failed_to_on_kill is not None else "?"
                print(f"run {run + 1}: task start->running {air.start_to_running:.3f} s (DAG run triggered->"
                      f"running {air.trigger_to_running:.3f} s; direct submit {submit_to_running:.3f} s); mark "
                      f"failed->killed {air.failed_to_killed:.3f} s, of which until the trigger's on_kill ran "
                      f"{on_kill} (direct kill {kill_to_killed:.3f} s)", flush=True)
        finally:
            stray = live.stop()
            if stray:
                print(f"warning: Airflow processes had to be killed after their sessions: {stray}", file=sys.stderr)
    a_ratio = statistics.median(a_air) / statistics.median(a_direct)
    b_ratio = statistics.median(b_air) / statistics.median(b_direct)
    print(f"task start->running {median_s(a_air)} vs direct submit {median_s(a_direct)}: {a_ratio:.1f}x; "
          f"mark failed->killed {median_s(b_air)} vs direct kill {median_s(b_direct)}: {b_ratio:.1f}x")


if __name__ == "__main__":
    main()
