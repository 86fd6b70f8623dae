"""Which Primus job belongs to which try of a task instance: the identity a retry checks before it
reattaches, so that it never attaches to another job (apache/airflow#71743: a reused pod name).

Every job the operator submits carries the task instance's tags (``dag_id``, ``task_id``,
``run_id``, ``map_index``, ``try_number``) and one ``submit_id`` tag: a random id of the submission
and the start time of the DAG run it was submitted in (``3f9c2a1b7e4d@2026-12-04T17:40:57+00:00``).
The start time tells a job of this DAG run from a stale one of an earlier run with the same run id
(a deleted and re-created run, a finished run cleared): both carry the same tags otherwise. It is
the scheduler's own clock, read from the DAG run, so the comparison is exact. The operator keeps
the job's ``JobIdentity`` in the task state store (Airflow >= 3.3) and checks it against the job's
tags before reattaching.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

#: Tags naming the task instance: every try of it shares them (``try_number`` is added on top).
TI_TAGS = ("dag_id", "task_id", "run_id", "map_index")
#: The tag holding ``<random id>@<DAG run start>``.
SUBMIT_TAG = "submit_id"


class JobIdentity(BaseModel):
    """What the task state store keeps of the job a try submitted (JSON)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    app_id: str
    #: The job's ``submit_id`` tag; None for an app id an older provider version stored bare.
    submit_id: str | None = None
    #: The task already returned this job's success: a later try (the task was cleared) trains again.
    delivered: bool = False

    @classmethod
    def from_stored(cls, value: Any) -> JobIdentity:
        """The stored value: this model as a dict, or a bare app id (stored by an older version)."""
        if isinstance(value, str):
            return cls(app_id=value)
        return cls.model_validate(value)

    def stored(self) -> dict[str, Any]:
        return self.model_dump()


@dataclass(frozen=True)
class TaskInstanceRef:
    """The running try, as far as matching it to a job goes."""

    tags: dict[str, str]
    try_number: int
    #: The DAG run's start time (ISO), ``unknown`` when the context has none.
    run_started: str

    @classmethod
    def from_context(cls, context: Any) -> TaskInstanceRef:
        ti = context["ti"]
        dag_run = context.get("dag_run")
        started = getattr(dag_run, "start_date", None)
        return cls(tags={name: str(getattr(ti, name)) for name in TI_TAGS}, try_number=int(ti.try_number),
                   run_started=started.isoformat() if started is not None else "unknown")

    def new_submit_id(self) -> str:
        return f"{uuid.uuid4().hex[:12]}@{self.run_started}"

    def job_tags(self, submit_id: str) -> dict[str, str]:
        """The tags of a job this try submits."""
        return {**self.tags, "try_number": str(self.try_number), SUBMIT_TAG: submit_id}

    def mismatch(self, job_tags: dict[str, Any], submit_id: str | None = None) -> str | None:
        """Why the job carrying ``job_tags`` is not this task instance's (None: it is).

        ``submit_id``: the one the task state store recorded for the job, when it did. Without it
        (a tag search, or a bare stored app id), the job must at least come from this DAG run."""
        wrong = [f"{name}={job_tags.get(name)!r} (this task instance: {value!r})"
                 for name, value in self.tags.items() if job_tags.get(name) != value]
        if wrong:
            return "it belongs to another task instance: " + ", ".join(wrong)
        theirs = job_tags.get(SUBMIT_TAG)
        if submit_id is not None:
            if theirs != submit_id:
                return (f"its {SUBMIT_TAG} tag is {theirs!r}, but this task instance's job was submitted as "
                        f"{submit_id!r}: the app id now names another job")
            return None
        if theirs is None:
            return f"it has no {SUBMIT_TAG} tag, so it cannot be told from a job of an earlier run of this DAG run id"
        run_started = str(theirs).partition("@")[2]
        if run_started != self.run_started:
            return (f"it was submitted in an earlier run with this run id (DAG run started {run_started}; "
                    f"this one started {self.run_started})")
        return None
