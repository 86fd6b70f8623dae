"""Time partitions: how they are labelled, read and walked.

A partition is a day (``2026-12-01``) or an hour (``2026-12-01T05``) of input. The spec checks
its range with these functions, the scanner walks them, the dispatcher and ``/metrics`` compute
watermarks with them, and the provider's asset watcher steps through them. Standard library
only: the watcher imports this module on the Airflow triggerer's event loop.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Iterator

DAY_LABEL, HOUR_LABEL = "%Y-%m-%d", "%Y-%m-%dT%H"  # how partitions are labelled
DAY_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
#: An hour as a spec may write it: ``2026-12-01T05``, ``2026-12-01 05``, ``2026-12-01T05:00(:00)``.
HOUR_RE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2})(?::00(?::00)?)?$")


def label_granularity(label: str) -> str:
    """``hour`` for a ``YYYY-MM-DDTHH`` partition label, ``day`` for ``YYYY-MM-DD``."""
    return "hour" if "T" in label else "day"


def label_end(label: str) -> dt.datetime:
    """The end of a partition's period (naive UTC): the next day or the next hour."""
    if label_granularity(label) == "hour":
        return dt.datetime.strptime(label, HOUR_LABEL) + dt.timedelta(hours=1)
    return dt.datetime.strptime(label, DAY_LABEL) + dt.timedelta(days=1)


def partition_hour(value: str, last: bool = False) -> dt.datetime:
    """The hour a partition time stands for (naive UTC): an hour itself; a date its hour 00, or
    with ``last`` its hour 23. A ``ValueError`` names what is accepted."""
    day, hour = DAY_RE.match(value), HOUR_RE.match(value)
    try:
        if hour:
            return dt.datetime(int(hour[1]), int(hour[2]), int(hour[3]), int(hour[4]))
        if day:
            return dt.datetime(int(day[1]), int(day[2]), int(day[3]), 23 if last else 0)
    except ValueError:
        pass
    raise ValueError(f"must be a date YYYY-MM-DD or an hour YYYY-MM-DDTHH, got {value!r}")


def walk(first: dt.datetime, last: dt.datetime | None, granularities: Collection[str | None] = ("day",)
         ) -> Iterator[tuple[str, dt.datetime]]:
    """(label, start) of the partitions from the hour ``first`` to the hour ``last`` (None: endless), in
    time order, each day before its first hour; ``granularities``: which of day and hour to yield."""
    day = first.replace(hour=0)
    while last is None or day <= last:
        if "day" in granularities:
            yield day.strftime(DAY_LABEL), day
        if "hour" in granularities:
            for hour in (day + dt.timedelta(hours=h) for h in range(24)):
                if first <= hour and (last is None or hour <= last):
                    yield hour.strftime(HOUR_LABEL), hour
        day += dt.timedelta(days=1)
