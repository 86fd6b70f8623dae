"""What can be checked about a spec on the machine that submits it, beyond the spec's own rules.

The spec's validation (``spec.py``) is pure: the AM validates the same spec again on a node where
the client's files are not. These checks look at the submitting machine: the roles' ``files`` (they
are shipped from here by every backend) and, where the AM reads this machine's files (the local
backend), the input's local directories: a source whose directory does not exist, and partitions
missing before a later one that is there (the scan would wait for them first, as long as
``input.wait_timeout`` lets it). ``primus validate`` and every submit (``PrimusClient.submit``) run
them, so that a mistake is met before a job waits forever for it. HDFS sources are not looked at:
validate needs no cluster, and a missing HDFS partition is the AM's to wait for, within
``input.wait_timeout``.

``problems`` refuse the spec (``SpecError``), one line per field, naming it and its value;
``warnings`` are for a spec that may be right but probably is not: ``primus validate`` and
``primus submit`` print them, other submits (the Airflow hook) log them.
"""

from __future__ import annotations

import datetime as dt
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from . import backends
from .data.source import Partition, partitions, utc_now
from .hadoop import is_hdfs
from .spec import FileSource, JobSpec, TimeRange, local_path

# Partitions looked at per source (a stat each): an hourly source over a year is 8,760.
MAX_PARTITIONS_CHECKED = 10_000
MAX_LISTED = 5  # partition labels a warning names


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check(job: JobSpec) -> Findings:
    """The problems and warnings of ``job`` on this machine."""
    found = Findings()
    found.problems += _missing_files(job)
    if job.input is not None and backends.get(job.backend.type).shares_files_with_client:
        # Elsewhere the AM reads its nodes' files, not this machine's (a local path is refused at submit
        # unless node_local, a promise about those nodes).
        now = utc_now()
        for i, source in enumerate(job.input.sources):
            if not is_hdfs(source.path):
                _check_source(f"input.sources[{i}].path", source, job.input.time_range,
                              job.input.wait_timeout, now, found)
    return found


def _missing_files(job: JobSpec) -> list[str]:
    # Paths are checked as the backends' submit reads them: a spec file's relative entries were made
    # absolute from its directory when it was loaded, a dict spec's are relative to the working directory.
    problems = []
    for i, role in enumerate(job.roles):
        for j, name in enumerate(role.files):
            if not Path(name).exists():
                where = "" if Path(name).is_absolute() else f" (relative to {Path.cwd()})"
                problems.append(f"roles[{i}].files[{j}]: no such file or directory{where}, got {name!r}")
    return problems


def _check_source(name: str, source: FileSource, time_range: TimeRange | None, wait_timeout: float | None,
                  now: dt.datetime, found: Findings) -> None:
    path = local_path(source.path).rstrip("/") or "/"
    # The directory its partitions are under: the path up to the first template.
    root = path if "{{" not in path else path[:path.index("{{")].rsplit("/", 1)[0] or "/"
    given = "" if root == path else f", got {source.path!r}"
    first = next(partitions(time_range, {source.granularity}))
    if not os.path.exists(root):
        if first.end is not None and first.end > now:
            found.warnings.append(f"{name}: input path {root} does not exist yet: the job waits for its first "
                                  f"partition ({first.label}){given}")
        else:  # nothing to read, or partitions that are over and whose directory cannot be there
            found.problems.append(f"{name}: input path {root} does not exist{given}")
        return
    if time_range is None:
        return
    over: list[Partition] = []  # partitions whose day or hour is over: their data could be there
    whole_range = True
    for partition in partitions(time_range, {source.granularity}):
        if len(over) == MAX_PARTITIONS_CHECKED or (partition.end is not None and partition.end > now):
            whole_range = False
            break
        over.append(partition)
    awaited = [_awaited(source, p.render(path)) for p in over]
    there = [os.path.exists(a) for a in awaited]
    last = max((k for k, ok in enumerate(there) if ok), default=-1)
    missing = [k for k in range(last) if not there[k]]
    bound = (f"for {wait_timeout:g} s (input.wait_timeout), then fails" if wait_timeout is not None
             else "forever (no input.wait_timeout)")
    if missing:
        labels = ", ".join(over[k].label for k in missing[:MAX_LISTED])
        more = f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
        found.warnings.append(f"{name}: {len(missing)} partition(s) missing before {over[last].label}, which is "
                              f"there: {labels}{more}; the job waits at {awaited[missing[0]]} {bound}{given}")
    elif last < 0 and over and whole_range:
        found.warnings.append(f"{name}: none of the {len(over)} partition(s) of time_range {time_range.start}.."
                              f"{time_range.end} is there, though all are over; the job waits at {awaited[0]} "
                              f"{bound}{given}")


def _awaited(source: FileSource, directory: str) -> str:
    """What the scan waits for in a partition's directory: its success marker, else the directory."""
    directory = directory.rstrip("/") or "/"
    return posixpath.join(directory, source.success_marker) if source.success_marker else directory
