"""What the provider's triggers hand back to their tasks: typed, dumped to JSON, validated back.

A trigger builds a ``PrimusTriggerEvent`` and fires its ``payload()``; the task resumed on a worker
reads it with ``PrimusTriggerEvent.of(event)``, so a field misspelt on either side fails loudly
instead of reading as missing. Airflow logs every event whole on one line ("Trigger fired event"):
the payload leaves out what is unset, and carries nothing the task can read again itself.

Light imports only (pydantic is loaded with Airflow already): the triggerer imports this module
on its event loop.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: A trigger event's reason is cut to this many characters (Airflow logs the event on one line).
MAX_EVENT_REASON = 300

EventStatus = Literal["success", "failed", "timeout", "error", "running"]


class LogCursor(BaseModel):
    """Where the task's copy of the followed trainer logs stands (``hooks.primus.LogFollower``)."""

    model_config = ConfigDict(extra="forbid")

    executors: list[str]
    #: ``<executor>/<stream>@<incarnation>`` -> bytes of whole lines copied.
    offsets: dict[str, int] = Field(default_factory=dict)
    #: ``<executor>/<stream>`` -> lines it may still copy now.
    allowance: dict[str, float] = Field(default_factory=dict)
    #: ``<executor>/<stream>`` -> lines skipped and not said yet.
    skipped: dict[str, int] = Field(default_factory=dict)
    #: When the last copy was made (epoch seconds).
    copied_at: float


class PrimusTriggerEvent(BaseModel):
    """One event of a Primus trigger.

    ``state`` is the job's state when the event fired (``unknown`` when unreadable); ``reason`` a
    whole sentence naming the job, what the task fails with; ``input_at_fault`` when a failure is
    the input's (the task fails without retry); a ``running`` hand-off carries the ``deadline`` to
    defer again with; ``log_cursor`` comes back as the task gave it to the trigger."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: EventStatus
    reason: str = Field(max_length=MAX_EVENT_REASON)
    app_id: str | None = None  # None: a partition's event, no job
    state: str | None = None
    input_at_fault: bool = False
    deadline: float | None = None
    log_cursor: LogCursor | None = None

    @classmethod
    def build(cls, status: EventStatus, reason: str, **fields: Any) -> PrimusTriggerEvent:
        """The event, its ``reason`` cut to ``MAX_EVENT_REASON`` characters."""
        if len(reason) > MAX_EVENT_REASON:
            reason = reason[:MAX_EVENT_REASON - 1] + "…"
        return cls(status=status, reason=reason, **fields)

    def payload(self) -> dict[str, Any]:
        """The JSON a ``TriggerEvent`` carries: only what is set. ``deadline`` stays on a hand-off even
        when None (no deadline), which the task passes on as it is."""
        payload = self.model_dump(mode="json", exclude_defaults=True)
        if self.status == "running":
            payload["deadline"] = self.deadline
        return payload

    @classmethod
    def of(cls, payload: dict[str, Any]) -> PrimusTriggerEvent:
        """The event a resumed task was given, validated."""
        return cls.model_validate(payload)
