"""What the sensors and triggers wait for, judged on one job status.

Each function takes a status (``PrimusHook.status``, a ``StatusSummary``) and returns a ``Check``: whether the
condition holds, a progress line for the task log, and, when the job ended without meeting it,
why it never will. Poke mode (sensors) and deferrable mode (triggers) call the same functions,
so both decide exactly alike.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from airflow_provider_primus.hooks.primus import FINISHED
from primus_runtime.client import data_progress, kafka_progress, progress_line
from primus_runtime.models import JobSummary, StatusSummary
from primus_runtime.states import ExecutorState, JobState

EXECUTOR_STATES = tuple(state.value for state in ExecutorState)


@dataclass(frozen=True)
class Check:
    met: bool
    line: str  # progress, logged when it changes
    impossible: str | None = None  # the job ended without meeting the condition: why
    input_at_fault: bool = False  # impossible because the input failed: a retry would read the same input


def _ended_reason(job: JobSummary) -> str:
    return f"Primus job {job.app_id} {job.state}: {job.reason or 'no reason given'}"


def job_succeeded(status: StatusSummary) -> Check:
    """The job succeeded; impossible once it ended otherwise (the reason is the runtime's)."""
    job = status.job
    line = f"{job.state}: {progress_line(status)}"
    if job.state == JobState.SUCCEEDED:
        return Check(True, line)
    if job.state in FINISHED:
        return Check(False, line, _ended_reason(job))
    return Check(False, line)


def role_reached(status: StatusSummary, role: str, state: str, count: int | None) -> Check:
    """At least ``count`` executors of ``role`` are in ``state`` (default: all its replicas)."""
    job = status.job
    roles = {r.name: r for r in status.roles}
    if role not in roles:
        line = f"role {role}: not started yet ({job.state})"
        if job.state in FINISHED:
            return Check(False, line, f"{_ended_reason(job)}; role {role} never appeared")
        return Check(False, line)
    wanted = roles[role].replicas if count is None else count
    have = roles[role].states.get(ExecutorState(state), 0) if state in EXECUTOR_STATES else 0
    line = f"role {role}: {have} of {wanted} {state}"
    if have >= wanted:
        return Check(True, line)
    if job.state in FINISHED:
        return Check(False, line, f"{_ended_reason(job)}; role {role} stopped at {have} of {wanted} {state}")
    return Check(False, line)


def watermark_passed(watermark: str | None, partition: str) -> bool:
    """Whether every record up to and including ``partition`` has been consumed.

    A day partition is passed by its own day or any later one, also in hours
    (``2026-12-02T00`` passes ``2026-12-01``); an hour partition by that hour or a later one
    (a day watermark ``2026-12-01`` covers every hour of that day)."""
    if not watermark:
        return False
    if len(watermark) == 10:  # a whole day consumed covers its last hour
        watermark += "T23"
    if len(partition) == 10:
        partition += "T23"
    return watermark >= partition


def normalize_time(value: str | dt.date | dt.datetime, name: str = "watermark_after") -> str:
    """A point in time as ISO 8601 in UTC with milliseconds (the spelling of Kafka watermarks).

    Accepts ``YYYY-MM-DD``, ``YYYY-MM-DDTHH``, any ISO 8601 time (``{{ ts }}``; without an offset it
    is read as UTC) and date or datetime objects."""
    if isinstance(value, dt.datetime):
        when = value
    elif isinstance(value, dt.date):
        when = dt.datetime(value.year, value.month, value.day)
    else:
        text = str(value).strip()
        try:
            when = dt.datetime.strptime(text, "%Y-%m-%dT%H") if len(text) == 13 else dt.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"{name} must be a time such as 2026-12-01, 2026-12-01T05 or "
                             f"2026-12-01T05:30:00+00:00, got {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")


def watermark_time(watermark: str) -> dt.datetime:
    """The time up to which a watermark says the input is read: a Kafka event time as it is; a file
    partition (``YYYY-MM-DD``, ``YYYY-MM-DDTHH``) at the end of its day or hour."""
    if len(watermark) == 10:
        return dt.datetime.fromisoformat(watermark).replace(tzinfo=dt.timezone.utc) + dt.timedelta(days=1)
    if len(watermark) == 13:
        return dt.datetime.strptime(watermark, "%Y-%m-%dT%H").replace(tzinfo=dt.timezone.utc) + dt.timedelta(hours=1)
    return dt.datetime.fromisoformat(watermark)


def watermark_at_or_after(watermark: str | None, after: str) -> bool:
    """Whether ``watermark`` (Kafka's or the files') is at or past the time ``after`` (``normalize_time``)."""
    return watermark is not None and watermark_time(watermark) >= dt.datetime.fromisoformat(after)


def data_reached(status: StatusSummary, min_progress: float | None, partition: str | None,
                 max_lag: int | None = None, watermark_after: str | None = None) -> Check:
    """Every condition given holds: the job's data progress reached ``min_progress`` (0..1), its
    watermark passed ``partition`` (normalized with ``partitions.normalize_partition``), the Kafka lag is
    known and at most ``max_lag`` records, the watermark is at or past ``watermark_after``
    (``normalize_time``; the Kafka event-time watermark when the input has a Kafka source, else the
    files' partition watermark, as the end of its day or hour)."""
    job = status.job
    data = status.data
    if data is None:
        if job.state in FINISHED or status.roles:
            return Check(False, "no input data", f"Primus job {job.app_id} has no input section: "
                                                 "it reports no data progress")
        return Check(False, f"data: not started yet ({job.state})")
    kafka = data.kafka
    line = data_progress(data) + ("" if data.watermark else ", watermark none")
    if kafka is not None:
        line += "; " + kafka_progress(kafka)
    elif max_lag is not None:
        return Check(False, line, f"Primus job {job.app_id}: max_lag={max_lag} needs an input with a Kafka "
                                  "source (input.kafka); this job's input has none")
    if data.state == "failed":
        # Never met by data that failed, whatever its watermark says (an empty partition passes it).
        return Check(False, line, f"Primus job {job.app_id}: input failed: "
                                  f"{data.failure or job.reason or 'no reason given'}",
                     input_at_fault=bool(data.failure))
    # progress is null until every partition is listed: a share of the tasks seen so far is no share of the input.
    watermark = kafka.watermark if kafka is not None else data.watermark
    met = (min_progress is None or float(data.progress or 0) >= min_progress) and \
          (partition is None or watermark_passed(data.watermark, partition)) and \
          (max_lag is None or (kafka is not None and kafka.lag is not None and kafka.lag <= max_lag)) and \
          (watermark_after is None or watermark_at_or_after(watermark, watermark_after))
    if met:
        return Check(True, line)
    if job.state in FINISHED:
        return Check(False, line, f"{_ended_reason(job)}; data progress stopped at {line}")
    return Check(False, line)
