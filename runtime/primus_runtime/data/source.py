"""Input sources: partitions of a time range, path templates, and the background scan.

A source's path template is filled in once per partition of the job's ``time_range``: a
day for a daily source, an hour for an hourly one. A job may mix both; partitions are read
in time order by their start, a day before its first hour (day D, D T00 .. D T23, day D+1,
...), so a day's daily data is handed out before the hours that start with it and no later
partition, of any source, is read before an earlier one's marker is there. The scanner
waits for each partition's success marker, lists the files matching the source's pattern
(never ``_SUCCESS``, ``_temporary``, or names starting with ``.`` or ``_``), splits them
into tasks with ``records.plan_splits`` and hands the partition to the dispatcher, sources
in spec order and files by path. An open-ended range keeps waiting for the next partition.
With ``input.wait_timeout``, a partition still awaited that long after its day or hour ended
fails the job, naming the marker (or directory) awaited.

Every filesystem call goes through fsspec (local paths and ``file://``; ``hdfs://`` and
``webhdfs://`` through WebHDFS, ``hadoop.hdfs_filesystem``, whose requests time out) and runs
in a worker thread, so the AM's event loop never blocks on a listing. Only "no such file"
means "not there yet": any other error (an unreachable NameNode) fails the scan, and the job,
with the source, the path and the reason.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import fnmatch
import functools
import logging
import posixpath
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .. import hadoop
from ..partitions import label_granularity, walk
from ..spec import FileSource, InputSpec, TimeRange
from .decompression import compression_for
from .dispatcher import Dispatcher, Task
from .records import plan_splits

log = logging.getLogger("primus.data")

SKIPPED_NAMES = ("_SUCCESS", "_temporary")


@dataclass(frozen=True)
class Partition:
    """One step of the time range; ``label`` is ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH`` ("" without a range)."""

    label: str
    time: dt.datetime | None

    @property
    def granularity(self) -> str | None:
        return None if self.time is None else label_granularity(self.label)

    @property
    def end(self) -> dt.datetime | None:
        """When its day or hour is over (UTC, naive as ``time``): before then its data cannot be complete."""
        if self.time is None:
            return None
        return self.time + (dt.timedelta(hours=1) if self.granularity == "hour" else dt.timedelta(days=1))

    def render(self, template: str) -> str:
        if self.time is None:
            return template
        t = self.time
        for token, value in (("YYYY", f"{t.year:04d}"), ("MM", f"{t.month:02d}"), ("DD", f"{t.day:02d}"),
                             ("HH", f"{t.hour:02d}")):
            template = template.replace("{{" + token + "}}", value)
        return template


def partitions(time_range: TimeRange | None, granularities: Collection[str | None] = ("day",)
               ) -> Iterator[Partition]:
    """The partitions to read by start time, each day before its first hour; endless for an open range,
    one for no range. ``granularities``: which of day and hour partitions the sources need."""
    if time_range is None:
        yield Partition("", None)
        return
    for label, start in walk(*time_range.hours(), granularities):
        yield Partition(label, start)


def readable(name: str) -> bool:
    return name not in SKIPPED_NAMES and not name.startswith((".", "_"))


class Scanner:
    """Walks the partitions in order and feeds the dispatcher, in the background."""

    def __init__(self, spec: InputSpec, dispatcher: Dispatcher, fs_for: Callable[[str], tuple[Any, str]] | None = None):
        self.spec = spec
        self.dispatcher = dispatcher
        self._fs_for = fs_for or _fsspec_for

    async def run(self, finish: bool = True) -> None:
        """``finish``: the scan ends with the files (no Kafka source follows them)."""
        try:
            sources = self.spec.sources
            for partition in partitions(self.spec.time_range, {s.granularity for s in sources}):
                tasks: list[Task] = []
                for source in sources:
                    if partition.time is None or source.granularity == partition.granularity:
                        tasks += await self._scan(source, partition)
                added = self.dispatcher.add_partition(partition.label, tasks)
                log.info("partition %s: %d task(s), %d new", partition.label or "(all)", len(tasks), added)
            if finish:
                self.dispatcher.scan_finished()
        except asyncio.CancelledError:
            raise
        except WaitTimedOut as exc:
            self.dispatcher.fail(str(exc))
        except Exception as exc:  # noqa: BLE001 - a scan that cannot go on fails the job with the reason
            log.exception("scan failed")
            self.dispatcher.scan_failed(f"{type(exc).__name__}: {exc}")

    async def _scan(self, source: FileSource, partition: Partition) -> list[Task]:
        url = partition.render(source.path)
        try:
            fs, path = self._fs_for(url)
            path = path.rstrip("/") or "/"
            if partition.time is None and not await asyncio.to_thread(_exists, fs, path):
                raise FileNotFoundError(f"source {source.name}: input path {url} does not exist")
            if source.success_marker is not None:
                await self._wait_for(fs, posixpath.join(path, source.success_marker), source, partition)
            elif partition.time is not None:
                await self._wait_for(fs, path, source, partition)
            self.dispatcher.waiting(None)
            return await asyncio.to_thread(self.build_tasks, fs, path, source, partition, _url_base(url))
        except (FileNotFoundError, WaitTimedOut):
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. the NameNode is unreachable: say where and what
            raise OSError(f"source {source.name}: cannot read {url}: {type(exc).__name__}: {exc}") from exc

    async def _wait_for(self, fs: Any, awaited: str, source: FileSource, partition: Partition) -> None:
        """Until ``awaited`` exists, checked every ``poll_interval``; ``WaitTimedOut`` once it kept the scan
        waiting ``wait_timeout`` past the partition's end (a partition not over yet is no one's mistake)."""
        limit = self.spec.wait_timeout
        deadline: float | None = None
        while not await asyncio.to_thread(_exists, fs, awaited):
            now = time.monotonic()
            if limit is not None and deadline is None:
                end = partition.end
                not_over = 0.0 if end is None else (end - utc_now()).total_seconds()
                deadline = now + max(not_over, 0.0) + limit
            if deadline is not None and now >= deadline:
                raise WaitTimedOut(f"waited {limit:g} s for {awaited} (source {source.name}, "
                                   f"input.wait_timeout {limit:g})")
            self.dispatcher.waiting(f"source {source.name}: waiting for {awaited}")
            # Not past the deadline: a wait_timeout shorter than poll_interval is kept to.
            pause = self.spec.poll_interval if deadline is None else min(self.spec.poll_interval, deadline - now)
            await asyncio.sleep(pause)

    def build_tasks(self, fs: Any, path: str, source: FileSource, partition: Partition,
                    url_base: str = "") -> list[Task]:
        """The tasks of the readable files in one listed directory, by path, each file split in order;
        a task's URL is ``url_base`` (``hdfs://host:port``, "" for local files) + the file's path."""
        entries = sorted((e for e in fs.ls(path, detail=True) if e.get("type") == "file"), key=lambda e: e["name"])
        match_all = source.pattern == "*"
        fmt, target = source.format, self.spec.task_size
        prefix = f"{source.name}/{partition.label}/" if partition.label else f"{source.name}/"
        tasks = []
        for entry in entries:
            file_path = entry["name"]
            name = file_path.rsplit("/", 1)[-1]
            if not readable(name) or not (match_all or fnmatch.fnmatchcase(name, source.pattern)):
                continue
            size = int(entry["size"])
            compression = compression_for(name) if source.compression == "auto" else source.compression
            splits = plan_splits(functools.partial(fs.open, file_path, "rb"), size, fmt, compression, target)
            url = url_base + file_path
            whole = fmt == "parquet" or compression != "none"
            for split in splits:
                share = (size // len(splits) if fmt == "parquet" else size) if whole else split.end - split.start
                tasks.append(Task(f"{prefix}{name}:{split.start}", partition.label, source.name, url, fmt,
                                  compression, split.start, split.end, max(share, 1)))
        return tasks


class WaitTimedOut(Exception):
    """A partition kept the scan waiting longer than ``input.wait_timeout``: the job fails with this reason."""


def utc_now() -> dt.datetime:
    """Now, in UTC and naive, as partition times are."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def _fsspec_for(url: str) -> tuple[Any, str]:
    if hadoop.is_hdfs(url):
        return hadoop.hdfs_filesystem(url), hadoop.hdfs_path(url)
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def _exists(fs: Any, path: str) -> bool:
    """Whether ``path`` exists; unlike fsspec's ``exists``, an unreachable filesystem is an error."""
    try:
        fs.info(path)
    except FileNotFoundError:
        return False
    return True


def _url_base(url: str) -> str:
    """``scheme://authority`` of an HDFS URL, so that tasks keep the user's form of it; "" for local paths."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if hadoop.is_hdfs(url) else ""
