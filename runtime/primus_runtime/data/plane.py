"""The AM's data plane as one component: scanner + dispatcher + journal.

The AM makes exactly these calls: ``start()`` once, ``heartbeat()`` for each report of
a consuming executor, ``release()`` when one ends, ``suspend()``/``resume()``/``savepoint()`` on request,
``status()`` for the API, ``backlog()`` for an autoscaled role, ``finish()`` and ``close()`` at the end.
What the data plane has to say goes back through ``DataEvents`` (an event for the job's log, or the
job must fail).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import hadoop
from ..am.autoscaler import Backlog
from ..models import DataReport, FeedStats
from ..spec import InputSpec, local_path
from .dispatch_views import data_status
from .dispatcher import RATE_WINDOW_SECONDS, DataEvents, Dispatcher, Ending, TaskState
from .journal import (
    UPLOAD_SECONDS,
    HdfsSnapshots,
    TaskJournal,
    read_checkpoints,
    recover,
    write_snapshot,
)
from .kafka import RATE_WINDOW_SECONDS as KAFKA_RATE_WINDOW
from .kafka import KafkaInput
from .source import Scanner

log = logging.getLogger("primus.data")


class DataPlane:
    def __init__(self, spec: InputSpec, events: DataEvents, private_journal: Path | None = None,
                 recovering: bool = False, job_name: str = "job"):
        """``private_journal``: where to journal the tasks for a restarted AM of this job when
        ``work_preserve_dir`` is not a local directory; ``recovering``: this AM is such a restart;
        ``job_name``: names a Kafka source's default consumer group."""
        self.spec = spec
        self.journal: TaskJournal | None = None  # a local work_preserve_dir, else the private journal
        self.remote: HdfsSnapshots | None = None  # a work_preserve_dir on HDFS
        self._problem: str | None = None  # found before start: the job fails at once
        self._unsaved: str | None = None  # the error (errno name) while the journal cannot be written
        self._namenode_http: str | None = None  # host:port serving WebHDFS for hdfs:// inputs
        recovered: dict[str, dict[str, Any]] = {}
        checkpoints: dict[str, str] = {}
        reading = "work_preserve_dir"
        try:
            if spec.work_preserve_dir is not None:
                if hadoop.is_hdfs(spec.work_preserve_dir):
                    self.remote = HdfsSnapshots(spec.work_preserve_dir)
                    self.remote.prepare()  # not writable there: fail now, not when progress is to be saved
                    recovered, checkpoints = self.remote.recover()
                else:
                    self.journal = TaskJournal(local_path(spec.work_preserve_dir))
                    recovered, checkpoints = self.journal.state, dict(self.journal.checkpoints)
            if self.journal is None and private_journal is not None:
                self.journal = TaskJournal(private_journal, keep_listing=False)
                if recovering and self.journal.state:  # exact up to the AM's death, unlike HDFS snapshots
                    recovered, checkpoints = self.journal.state, dict(self.journal.checkpoints)
            if spec.restore_from is not None and not recovered:
                reading = "restore_from"
                if hadoop.is_hdfs(spec.restore_from):
                    recovered, checkpoints = HdfsSnapshots(spec.restore_from).recover()
                else:
                    recovered = recover(local_path(spec.restore_from))
                    checkpoints = read_checkpoints(local_path(spec.restore_from))
                if not recovered:
                    self._problem = f"restore_from: no saved task positions in {spec.restore_from}"
                elif self.journal is not None:  # this job's own journal starts from the savepoint
                    write_snapshot(self.journal.dir, recovered, checkpoints)
                    self.journal.state, self.journal.checkpoints = dict(recovered), dict(checkpoints)
                elif self.remote is not None:
                    self.remote.save(recovered, checkpoints)
                log.info("restored from %s", spec.restore_from)
        # OSError: e.g. the NameNode is unreachable; RuntimeError: fsspec's WebHDFS refusals.
        except (OSError, RuntimeError, hadoop.HadoopConfigError) as exc:
            self._problem = f"{reading}: cannot read the saved task positions: {type(exc).__name__}: {exc}"
        if recovered:
            done = sum(1 for t in recovered.values() if t.get("state") == "done")
            log.info("earlier progress: %d task(s) known, %d done", len(recovered), done)
        self.dispatcher = Dispatcher(spec, events, self.journal, recovered)
        self.dispatcher.checkpoints.update(checkpoints)
        self.scanner = Scanner(spec, self.dispatcher)
        self.kafka = KafkaInput(spec, self.dispatcher, job_name) if spec.kafka is not None else None
        self._tasks: list[asyncio.Task] = []
        # Executor id (the holder without one) -> how its feeding goes, as last reported (metrics).
        self.feed_stats: dict[str, FeedStats] = {}

    @property
    def limit(self) -> int:
        return self.dispatcher.limit

    def start(self) -> None:
        if self._problem is not None:
            self.dispatcher.fail(self._problem)
            return
        self._tasks = [asyncio.ensure_future(self._scan()), asyncio.ensure_future(self._flush_forever())]

    async def _scan(self) -> None:
        """The file sources' partitions, then the Kafka source's (files first: one stream)."""
        if self.spec.sources:
            await self.scanner.run(finish=self.kafka is None)
            # A million tasks are millions of objects that live as long as the job: out of the
            # collector's sight, or each full collection stalls the AM for a fraction of a second.
            gc.freeze()
        if self.kafka is not None and self.dispatcher.failure is None:
            await self.kafka.run()

    def consumers(self, count: int) -> None:
        """How many consuming executors are registered or running: Kafka partitions are spread over them."""
        self.dispatcher.expected_consumers = count

    def heartbeat(self, holder: str, report: DataReport, slot: str | None = None) -> dict[str, Any]:
        if report.feed is not None:
            self.feed_stats[slot or holder] = report.feed
        reply = self.dispatcher.heartbeat(holder, report, slot)
        for assignment in reply.get("tasks") or ():
            if self.kafka is not None and assignment["url"].startswith("kafka://"):
                assignment["kafka"] = self.kafka.assignment(self.dispatcher.tasks[assignment["task_id"]])
            else:
                assignment["url"] = self._reader_url(assignment["url"])
        return reply

    def _reader_url(self, url: str) -> str:
        """Where an executor reads a task's file: ``hdfs://`` paths from the NameNode's WebHDFS
        (``webhdfs://host:port/path``), so executors need no Hadoop configuration. Status, journal
        and errors keep the user's URL."""
        if not url.startswith("hdfs://"):
            return url
        if self._namenode_http is None:
            # The AM's Hadoop configuration, else the address its client handed it (PRIMUS_WEBHDFS).
            self._namenode_http = hadoop.webhdfs_base(url).split("://", 1)[1]
        return f"webhdfs://{self._namenode_http}{hadoop.hdfs_path(url)}"

    def adopt(self, holders: set[str]) -> None:
        """A restarted AM adopted these executors: the tasks they were reading stay theirs."""
        self.dispatcher.adopted = set(holders)

    def journal_write(self) -> None:
        """The AM's end of a step: what changed goes to the journal before any answer leaves."""
        if self.journal is not None:
            self._save_journal(self.journal.write)

    def checkpoint(self, slot: str) -> str | None:
        """Exactly-once: the checkpoint the last trainer of ``slot`` (an executor id) committed."""
        return self.dispatcher.checkpoints.get(slot)

    def release(self, holder: str, ending: Ending, reason: str, slot: str = "") -> None:
        self.feed_stats.pop(slot or holder, None)
        self.dispatcher.release(holder, ending, reason, slot)

    @property
    def consumed(self) -> bool:
        """Every task read (or enough of them, per ``success_percent``)."""
        return self.dispatcher.consumed

    def left(self) -> str:
        return self.dispatcher.left()

    def suspend(self, actor: str | None = None) -> dict[str, Any]:
        self.dispatcher.suspend(actor)
        return self.status()

    def resume(self, actor: str | None = None) -> dict[str, Any]:
        self.dispatcher.resume(actor)
        return self.status()

    def status(self) -> dict[str, Any]:
        status = data_status(self.dispatcher)
        if self.kafka is not None:
            status["kafka"] = self.kafka.status()
            status["progress"] = None  # Kafka's share is counted in offsets, not bytes: see status["kafka"]
        return status

    @property
    def handing_out(self) -> bool:
        """Tasks are being handed out: not suspended, not failed, not read to the end (nor to
        ``success_percent``). Only then does the backlog say how many consumers are needed."""
        d = self.dispatcher
        return not (d.suspended or d.enough or d.failure is not None or self.consumed)

    def backlog(self) -> Backlog:
        """What is left to read and how fast it goes: what an autoscaled consuming role is sized on."""
        d = self.dispatcher
        if self.kafka is not None and self.kafka.tasks:  # listed once the files are: is a file task left?
            unresolved = sum(n for state, n in d.counts.items() if not state.resolved)
            streams = sum(1 for t in self.kafka.tasks.values() if not t.state.resolved)
            files_left = unresolved > streams
        if self.kafka is not None and self.kafka.tasks and not files_left:
            lag = self.kafka.total_lag()
            return Backlog("kafka", lag or 0, self.kafka.records_rate(), False, KAFKA_RATE_WINDOW)
        return self._files_backlog()

    def _files_backlog(self) -> Backlog:
        d = self.dispatcher
        # A quarantined task is never read, and its bytes never count as done.
        skipped = sum(d.tasks[t].size - d.tasks[t].bytes_done for t in d.quarantined
                      if d.tasks[t].state is TaskState.QUARANTINED)
        queued = max(0, d.bytes_total - d.bytes_done - skipped)
        return Backlog("files", queued, d.rate(), d.scan_complete, RATE_WINDOW_SECONDS)

    async def savepoint(self, directory: str) -> dict[str, Any]:
        """Every task's position, written to ``directory`` (a job started with ``restore_from`` there
        resumes from it); what was saved."""
        state = self.dispatcher.saved_state()
        if hadoop.is_hdfs(directory):
            await asyncio.to_thread(HdfsSnapshots(directory).save, state, dict(self.dispatcher.checkpoints))
        else:
            await asyncio.to_thread(write_snapshot, local_path(directory), state, dict(self.dispatcher.checkpoints))
        done = sum(1 for t in state.values() if t["state"] == "done")
        return {"dir": directory, "tasks": len(state), "done": done,
                "records": sum(t["records"] for t in state.values())}

    def finish(self, job_state: str) -> None:
        self.dispatcher.finish(job_state)
        for task in self._tasks:
            task.cancel()
        if self.kafka is not None:
            self.kafka.finish()
        if self.journal is not None:
            self._save_journal(self.journal.flush)
        self._upload()

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.kafka is not None:
            self.kafka.close()
        if self.journal is not None:
            self._save_journal(self.journal.close)
            self.journal = None
        self._upload()
        self.remote = None

    def _positions(self) -> tuple[dict[str, dict[str, Any]], dict[str, str], float]:
        """What the HDFS snapshot keeps: every task's position, including recovered tasks the scan has
        not listed again yet (a second crash must not forget them), the committed checkpoints, and
        when they were read."""
        return ({**self.dispatcher.recovered, **self.dispatcher.saved_state()}, dict(self.dispatcher.checkpoints),
                time.monotonic())

    def _upload(self) -> None:
        if self.remote is not None and self._problem is None:
            try:
                self.remote.save(*self._positions())
            except Exception:  # noqa: BLE001 - a failed save must not stop the job (or its end)
                log.exception("cannot save the task positions to %s", self.spec.work_preserve_dir)

    async def _flush_forever(self) -> None:
        uploaded_at = time.monotonic()
        while self.journal is not None or self.remote is not None:
            await asyncio.sleep(0.25)
            try:
                if self.journal is not None:
                    self._save_journal(self.journal.maybe_flush)
                if self.remote is not None and time.monotonic() - uploaded_at >= UPLOAD_SECONDS:
                    uploaded_at = time.monotonic()
                    await asyncio.to_thread(self.remote.save, *self._positions())
            except OSError:
                log.exception("cannot write the task journal in %s", self.spec.work_preserve_dir)

    def _journal_dir(self) -> str:
        if self.spec.work_preserve_dir is not None and self.remote is None:
            return f"work_preserve_dir {self.spec.work_preserve_dir}"
        return f"the task journal {self.journal.dir if self.journal is not None else ''}"

    def _save_journal(self, save: Callable[[], None]) -> None:
        """Write the journal; when that fails (a full disk, a lost mount) training goes on with its
        progress unsaved, since stopping it would lose more than the journal protects: one event
        when saving stops, naming the directory and the error, and one when it works again."""
        try:
            save()
        except OSError as exc:
            if self._unsaved is None:
                code = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
                self._unsaved = code
                self.dispatcher.events.data_event(
                    "data", None, "unsaved",
                    f"{self._journal_dir()}: cannot save the task positions: "
                    f"{code} ({exc.strerror or exc}); reading goes on, unsaved: a job restarted from this "
                    f"directory would read again what was read since; retried at each step")
            return
        if self._unsaved is not None:
            self.dispatcher.events.data_event(
                "data", "unsaved", "saved",
                f"{self._journal_dir()}: the task positions are saved again "
                f"(after {self._unsaved})")
            self._unsaved = None

