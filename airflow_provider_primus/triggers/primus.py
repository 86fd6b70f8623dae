"""PrimusJobTrigger: waits in the triggerer for a Primus job to end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_primus.hooks.primus import FINISHED, PrimusHook
from primus_runtime.client import JobNotFound, progress_line

#: Status reads that may fail in a row (AM restarting, a loaded machine) before the trigger gives up.
MAX_READ_ERRORS = 5


class PrimusJobTrigger(BaseTrigger):
    """Fires once the job ends, the deadline passes, or its status cannot be read.

    Event payload: ``{"status": "success" | "failed" | "timeout" | "error", "app_id", "state",
    "reason"}``. Role progress is logged whenever it changes, so the task log shows it while the
    task is deferred.

    :param app_id: the job to watch.
    :param primus_conn_id: the ``primus`` connection it was submitted through.
    :param poll_interval: seconds between status reads.
    :param deadline: absolute time (epoch seconds) after which a ``timeout`` event fires; Airflow
        does not apply ``execution_timeout`` to a deferred task, the operator passes it here.
    :param on_kill_action: ``"kill"`` stops the job when a user marks the deferred task failed or
        success, or clears it (Airflow >= 3.3 calls ``on_kill``); ``"keep"`` leaves it.
    """

    def __init__(self, app_id: str, primus_conn_id: str = PrimusHook.default_conn_name,
                 poll_interval: float = 5.0, deadline: float | None = None, on_kill_action: str = "kill"):
        super().__init__()
        self.app_id = app_id
        self.primus_conn_id = primus_conn_id
        self.poll_interval = poll_interval
        self.deadline = deadline
        self.on_kill_action = on_kill_action

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "app_id": self.app_id,
            "primus_conn_id": self.primus_conn_id,
            "poll_interval": self.poll_interval,
            "deadline": self.deadline,
            "on_kill_action": self.on_kill_action,
        }

    def _hook(self) -> PrimusHook:
        return PrimusHook(primus_conn_id=self.primus_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        hook = self._hook()
        last_line, errors = None, 0
        while True:
            if self.deadline is not None and time.time() > self.deadline:
                yield self._event("timeout", "running", "the task's execution_timeout passed")
                return
            try:
                # The client is synchronous (file reads, one HTTP request): keep it off the loop.
                status = await asyncio.to_thread(hook.status, self.app_id)
                errors = 0
            except JobNotFound:
                yield self._event("error", "gone", f"Primus job {self.app_id} does not exist (any more)")
                return
            except Exception as exc:  # noqa: BLE001 - transient until it happens MAX_READ_ERRORS times
                errors += 1
                if errors >= MAX_READ_ERRORS:
                    yield self._event("error", "unknown", f"cannot read the job's status: {exc}")
                    return
                self.log.warning("Cannot read the status of Primus job %s (%s); retrying", self.app_id, exc)
            else:
                job = status["job"]
                line = f"{job['state']}: {progress_line(status)}"
                if line != last_line:
                    self.log.info("Primus job %s %s", self.app_id, line)
                    last_line = line
                if job["state"] in FINISHED:
                    outcome = "success" if job["state"] == "succeeded" else "failed"
                    yield self._event(outcome, job["state"], job.get("reason") or "")
                    return
            await asyncio.sleep(self.poll_interval * (2 ** min(errors, 4)) if errors else self.poll_interval)

    def _event(self, status: str, state: str, reason: str) -> TriggerEvent:
        return TriggerEvent({"status": status, "app_id": self.app_id, "state": state, "reason": reason})

    async def on_kill(self) -> None:
        # Only on a user's action on the deferred task; cleanup() (every exit, also a triggerer
        # restart) deliberately leaves the job alone.
        if self.on_kill_action != "kill":
            return
        self.log.info("Deferred task killed: stopping Primus job %s", self.app_id)
        hook = self._hook()
        await asyncio.to_thread(lambda: hook.kill(self.app_id, "the deferred Airflow task was killed", wait=False))
