"""Sensors: a job succeeds, a role reaches a state, the data progress reaches a point, an input partition is ready.

Each works in poke mode and, with ``deferrable=True`` (default ``[operators] default_deferrable``),
waits in the triggerer. Both modes judge with the same functions (``conditions.py``): a sensor
checks once before deferring, so a condition already met costs no deferral.
"""

from __future__ import annotations

import abc
import datetime as dt
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_provider_primus.conditions import (
    EXECUTOR_STATES,
    Check,
    data_reached,
    job_succeeded,
    normalize_time,
    role_reached,
)
from airflow_provider_primus.events import PrimusTriggerEvent
from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.partitions import PartitionPath, normalize_partition, partition_ready
from airflow_provider_primus.templating import PartitionPlaceholdersMixin
from airflow_provider_primus.triggers.primus import (
    PrimusDataProgressTrigger,
    PrimusJobTrigger,
    PrimusPartitionTrigger,
    PrimusRoleTrigger,
    PrimusStatusTrigger,
)
from primus_runtime.models import StatusSummary
from primus_runtime.states import ExecutorState

if TYPE_CHECKING:
    from airflow.sdk import Context


class _DeferrableSensor(BaseSensorOperator):
    """Poke, or check once and then defer to ``make_trigger()``; ``execute_complete`` ends it."""

    def __init__(self, *, deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deferrable = deferrable

    @abc.abstractmethod
    def make_trigger(self, deadline: float) -> Any:
        """The trigger that waits for the condition until ``deadline`` (epoch seconds)."""

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        if self.poke(context):
            return None
        self.defer(trigger=self.make_trigger(time.time() + self.timeout), method_name="execute_complete",
                   timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> None:
        fired = PrimusTriggerEvent.of(event)
        if fired.status == "success":
            self.log.info("%s", fired.reason or "condition met")
            return
        reason = fired.reason or f"sensor ended with {fired.status}"
        if fired.input_at_fault:
            raise AirflowFailException(f"{reason} (not retried: the next try would read the same input)")
        raise AirflowException(reason)


class _PrimusJobSensor(_DeferrableSensor):
    """A condition on one job's status."""

    def __init__(self, *, app_id: str, primus_conn_id: str = PrimusHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_id = app_id
        self.primus_conn_id = primus_conn_id

    @abc.abstractmethod
    def check(self, status: StatusSummary) -> Check:
        """The condition judged on a summary status."""

    def poke(self, context: Context) -> bool:
        # Conditions judge the job, its roles' counts and its data: no executor rows needed.
        check = self.check(PrimusHook(primus_conn_id=self.primus_conn_id).status(self.app_id, summary=True))
        self.log.info("Primus job %s %s", self.app_id, check.line)
        if check.input_at_fault:
            raise AirflowFailException(f"{check.impossible} (not retried: the next try would read the same input)")
        if check.impossible:
            raise AirflowException(check.impossible)
        return check.met

    def _trigger_args(self, deadline: float) -> dict[str, Any]:
        return {"app_id": self.app_id, "primus_conn_id": self.primus_conn_id,
                "poll_interval": self.poke_interval, "deadline": deadline}

    @abc.abstractmethod
    def make_trigger(self, deadline: float) -> PrimusStatusTrigger:
        """The trigger judging the same condition (``check``) in the triggerer."""


class PrimusJobSensor(_PrimusJobSensor):
    """True once the job succeeded; fails if it ended otherwise. Watching only: unlike the submit
    operator's wait, killing this sensor never stops the job.

    :param app_id: the job (templated; e.g. the ``app_id`` XCom of a submit task that does not wait).
    :param deferrable: wait in the triggerer (``PrimusJobTrigger``).
    """

    template_fields: Sequence[str] = ("app_id", "primus_conn_id")

    def check(self, status: StatusSummary) -> Check:
        return job_succeeded(status)

    def make_trigger(self, deadline: float) -> PrimusStatusTrigger:
        return PrimusJobTrigger(on_kill_action="keep", **self._trigger_args(deadline))


class PrimusRoleSensor(_PrimusJobSensor):
    """True once at least ``count`` executors of ``role`` are in ``state``, e.g. the workers all
    running, or the evaluator succeeded. Fails at once if the job ends without getting there.

    :param app_id: the job (templated; e.g. the ``app_id`` XCom of the submitting task).
    :param role: the role to watch (templated).
    :param state: an executor state (``running``, ``succeeded``, ...).
    :param count: how many executors must be in it; default: all of the role's replicas.
    :param deferrable: wait in the triggerer (``PrimusRoleTrigger``).
    """

    template_fields: Sequence[str] = ("app_id", "role", "primus_conn_id")

    def __init__(self, *, app_id: str, role: str, state: str = ExecutorState.RUNNING.value, count: int | None = None,
                 primus_conn_id: str = PrimusHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(app_id=app_id, primus_conn_id=primus_conn_id, **kwargs)
        if state not in EXECUTOR_STATES:
            raise ValueError(f"state must be one of {list(EXECUTOR_STATES)}, got {state!r}")
        if count is not None and count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        self.role, self.state, self.count = role, state, count

    def check(self, status: StatusSummary) -> Check:
        return role_reached(status, self.role, self.state, self.count)

    def make_trigger(self, deadline: float) -> PrimusStatusTrigger:
        return PrimusRoleTrigger(role=self.role, state=self.state, count=self.count, **self._trigger_args(deadline))


class PrimusDataProgressSensor(_PrimusJobSensor):
    """True once the job has consumed enough of its input: every condition given holds (a fraction
    of it, every partition up to ``partition``, a Kafka lag of at most ``max_lag``, a watermark at or
    past ``watermark_after``). Fails if the job ends first.

    :param app_id: the job (templated).
    :param min_progress: fraction of the input (0..1, by bytes of the tasks scanned so far).
    :param partition: a time partition (templated), e.g. ``"{{ ds }}"``, ``2026-12-01T05``.
    :param max_lag: records not read yet of the input's Kafka source (its total lag): done once the lag
        is known and at most this. An input without a Kafka source fails the sensor.
    :param watermark_after: a time (templated; ``2026-12-01``, ``2026-12-01T05``, ISO 8601, UTC unless
        it says otherwise): done once the watermark is at or past it; with a Kafka source its event-time
        watermark, else the files' partition watermark, taken as the end of its day or hour.
    :param deferrable: wait in the triggerer (``PrimusDataProgressTrigger``).
    """

    template_fields: Sequence[str] = ("app_id", "partition", "watermark_after", "primus_conn_id")

    def __init__(self, *, app_id: str, min_progress: float | None = None, partition: str | None = None,
                 max_lag: int | None = None, watermark_after: str | None = None,
                 primus_conn_id: str = PrimusHook.default_conn_name, **kwargs: Any) -> None:
        super().__init__(app_id=app_id, primus_conn_id=primus_conn_id, **kwargs)
        if min_progress is None and partition is None and max_lag is None and watermark_after is None:
            raise ValueError("give min_progress (0..1), partition (e.g. '{{ ds }}'), max_lag (Kafka records), "
                             "watermark_after (e.g. '{{ ts }}'), or several")
        if min_progress is not None and not 0 <= min_progress <= 1:
            raise ValueError(f"min_progress must be between 0 and 1, got {min_progress!r}")
        if max_lag is not None and (isinstance(max_lag, bool) or not isinstance(max_lag, int) or max_lag < 0):
            raise ValueError(f"max_lag must be a whole number of records >= 0, got {max_lag!r}")
        self.min_progress, self.partition = min_progress, partition
        self.max_lag, self.watermark_after = max_lag, watermark_after

    def _partition(self) -> str | None:
        return None if self.partition is None else normalize_partition(self.partition)

    def _watermark_after(self) -> str | None:
        return None if self.watermark_after is None else normalize_time(self.watermark_after)

    def check(self, status: StatusSummary) -> Check:
        return data_reached(status, self.min_progress, self._partition(), self.max_lag, self._watermark_after())

    def make_trigger(self, deadline: float) -> PrimusStatusTrigger:
        return PrimusDataProgressTrigger(min_progress=self.min_progress, partition=self._partition(),
                                         max_lag=self.max_lag, watermark_after=self._watermark_after(),
                                         **self._trigger_args(deadline))


class PrimusPartitionSensor(PartitionPlaceholdersMixin, _DeferrableSensor):
    """True once a time partition of an input path is complete: its success marker exists.

    The path uses the job spec's placeholders, e.g. ``/data/clicks/{{YYYY}}{{MM}}{{DD}}`` with
    ``partition="{{ ds }}"``. On HDFS (an ``hdfs://`` or ``webhdfs://`` path, or any path when
    ``webhdfs_conn_id`` is given) it asks the NameNode through the hdfs provider's
    ``WebHDFSHook``; otherwise it looks on this machine's filesystem. Unlike the hdfs provider's
    own sensors it can wait in the triggerer.

    :param path: partition path template (templated; Airflow's ``{{ ds }}`` works too).
    :param partition: the partition's time (templated), e.g. ``"{{ ds }}"`` or ``"{{ ts }}"``.
    :param success_marker: file that marks the partition complete; ``None``: the directory itself.
    :param webhdfs_conn_id: a ``webhdfs`` connection (apache-airflow-providers-apache-hdfs).
    :param deferrable: wait in the triggerer (``PrimusPartitionTrigger``).
    """

    template_fields: Sequence[str] = ("path", "partition", "success_marker")

    def __init__(self, *, path: str, partition: str | dt.date, success_marker: str | None = "_SUCCESS",
                 webhdfs_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path, self.partition = path, partition
        self.success_marker, self.webhdfs_conn_id = success_marker, webhdfs_conn_id

    def _target(self) -> PartitionPath:
        return PartitionPath.of(self.path, normalize_partition(self.partition), self.success_marker,
                                self.webhdfs_conn_id)

    def poke(self, context: Context) -> bool:
        target = self._target()
        ready = partition_ready(target)
        self.log.info("Partition %s: %s", target.describe(), "ready" if ready else "not ready yet")
        return ready

    def make_trigger(self, deadline: float) -> PrimusPartitionTrigger:
        target = self._target()
        return PrimusPartitionTrigger(path=target.marker_path, webhdfs_conn_id=target.webhdfs_conn_id,
                                      poll_interval=self.poke_interval, deadline=deadline)

