"""Feeding input tasks to the trainer's stdin (standard library only, Python 3.9+).

The AM assigns tasks on heartbeat replies. Reader threads (one per task read at a
time) read each task's records with ``data.records.read_framed`` and put them,
framed (``formats.frame``: text lines end with a newline, binary records get a 4-byte
big-endian length), in chunks of about ``CHUNK_BYTES`` into a bounded buffer; one
writer thread writes the chunks into the trainer's stdin pipe. A full pipe blocks the
writer, a full buffer blocks the readers: backpressure all the way to the files.

Uncompressed text, jsonl and raw tasks take a faster path (``byte_ranges.framed_ranges``): the
reader only finds the byte ranges of about ``byte_ranges.RANGE_SIZE`` that hold whole records
(counting a range's lines in C, so positions stay exact record counts), and the writer moves
them from the file into the pipe with ``os.splice`` (Linux; ``pread`` + ``write`` elsewhere):
the records never pass through Python. Raw records get their 4-byte length written before
each 64 KiB of the file. Lines that must change when fed (``\r\n``, a last line without
newline) come as bytes, as on the other path. The pipe is enlarged to ``PIPE_BYTES`` where
the system allows it. That path needs a local file. HDFS tasks (``webhdfs://`` URLs) read one
streamed WebHDFS response per task (``data/webhdfs.py``); uncompressed text and jsonl go in
blocks of the same range size, each read once into a buffer and fed from it
(``streaming.streamed_lines``). Their bytes must pass through Python once, since positions are
exact record counts: splicing socket -> pipe would leave the lines uncounted. Such a task's
stream is read ahead (``streaming.ReadAhead``) from the moment it is assigned, by a thread of its
own on a connection of its own: the next task's request is made, and its first blocks read,
while the one before is fed, and the socket is read while the reader counts lines; buffers are
used again once fed (no new, zeroed 1 MiB per block).

What the executor reports as a task's position (records and bytes delivered) must be
safe to resume from: a record still in the pipe, or in the trainer's own read buffer,
when the trainer dies was never consumed. So a position counts only once

- its chunk has left the pipe (``FIONREAD`` on the pipe says how much is unread) and
  another ``trainer_buffer`` bytes (``input.trainer_buffer``, default ``TRAINER_BUFFER``: 8 KiB,
  what ``sys.stdin`` takes from a pipe at a time) have left after it: room for the trainer's own
  read buffer, or
- the pipe is empty and a process of the trainer's group is blocked reading it
  (``/proc/<pid>/wchan``): a trainer that reads its stdin in a loop asks for more only
  once it is done with what it read, so everything written so far was consumed, or
- (where /proc cannot tell, or the trainer waits with select/poll) the pipe has been seen
  empty for ``QUIET_SECONDS``, with nothing more written.

When the trainer dies, its final positions are exact to the record: the kernel says how much of the
pipe was still unread at that moment, the trainer had taken everything before it, and it was done
with all of that but its read buffer. So the records that end ``trainer_buffer`` bytes before the
unread part count as consumed (found in the chunks as written, kept until the trainer is past them):
a kill feeds again at most ``trainer_buffer`` bytes the trainer had processed, nothing it had not.
Bytes count as written only once the ``write``/``splice`` that put them in the pipe has returned,
and that count is taken before the pipe is asked, so a write in between can only make the trainer
look behind, never ahead. The executor asks ``FIONREAD`` on its end of the pipe: the write end
while it feeds, then a read end it opens (close-on-exec, never read from) just before it closes the
write end, so that after the end of the input, or a drain, the unread part is still known: a
trainer killed while it reads its last pipe-full after EOF loses none of it.

The price is bounded duplicates after a crash (at-least-once), never lost records for a
trainer that reads stdin in a loop. A trainer that reads ahead into queues of its own, or through
larger buffers (Java's reader stack, Node.js streams: 16-64 KiB), must say so in
``input.trainer_buffer``.

A trainer that reads with ``data.reader.records()`` says exactly how many records it is done
with (every record before the one it asked for last) in a shared 16-byte file,
``PRIMUS_READ_POSITION_FILE``; positions then come from that count, mapped back to tasks
through the log of what was written (as for exactly-once commits), and a trainer killed
mid-task sees again only the record it had in hand.

When the AM says the input is exhausted and this executor holds no task, the pipe is
closed: the trainer reads EOF and exits on its own.

Every report also says how the feeding goes (``feed``, exported by the AM as metrics): bytes and
records written into the pipe per second over the last ``RATE_WINDOW`` seconds, and how full the
buffer between the readers and the writer is. A full buffer with a low rate means the trainer is
the bottleneck; an empty one, the input's storage.

Exactly-once (``delivery: exactly_once``): positions count only once the trainer has
committed them. It appends ``{"checkpoint": id, "records": n}`` lines to
``PRIMUS_DATA_COMMIT_FILE`` right after saving a model checkpoint (``data.reader.commit``
does it), ``n`` being the records it has read from stdin so far; the executor maps ``n``
back to task positions through the log of what it wrote. A replacement trainer resumes
from the committed positions and finds the checkpoint to restore in
``PRIMUS_RESTORE_CHECKPOINT``. Here the pipe is closed once nothing is left to hand out
and everything held is written; a trainer that then exits 0 has consumed it all.
"""

from __future__ import annotations

import collections
import errno
import fcntl
import json
import logging
import mmap
import os
import queue
import stat
import struct
import sys
import termios
import threading
import time
from collections.abc import Iterator
from typing import IO, Any, BinaryIO, cast

from .. import procfs
from ..data import byte_ranges, formats, kafka_reader, streaming, webhdfs
from ..data.records import read_framed

log = logging.getLogger("primus.executor")

CHUNK_BYTES = formats.READ_SIZE  # framed records per write (read_framed blocks): the granularity of positions
BUFFER_CHUNKS = 32  # chunks read ahead of the trainer (2 MiB)
# What a trainer that reads stdin itself may hold, taken from the pipe but not processed: Python's
# sys.stdin reads 8 KiB at a time (C stdio 4 KiB, Rust's BufReader 8 KiB). input.trainer_buffer.
TRAINER_BUFFER = 8 * 1024
QUIET_SECONDS = 5.0
READERS_REFRESH = 1.0  # seconds between walks of /proc for the processes reading the trainer's stdin
PIPE_BYTES = 1024 * 1024  # the trainer's stdin pipe is made this large (F_SETPIPE_SZ) when allowed
RATE_WINDOW = 10.0  # seconds over which the feed rates are measured
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031 if sys.platform.startswith("linux") else None)
_RAW_LENGTH = struct.Struct(">I")


def _streamed(assignment: dict[str, Any]) -> bool:
    """A task read once, front to back, from a stream (WebHDFS): no pread, no splice."""
    return str(assignment["url"]).startswith("webhdfs://")


def _read_ahead(assignment: dict[str, Any]) -> streaming.ReadAhead | None:
    """A WebHDFS text task's stream, read ahead from now on a connection of its own: when the reader
    thread gets to it (once the task before is fed), the request is made and the first blocks are
    there, and while it counts lines the next ones arrive. None for other tasks."""
    if not (_streamed(assignment) and assignment["format"] in ("text", "jsonl")
            and assignment["compression"] == "none" and not assignment.get("kafka")):
        return None
    url, start, end = str(assignment["url"]), int(assignment["start"]), int(assignment["end"])
    return streaming.ReadAhead(lambda: open_input(url), start, _range_size(end - start))


def _range_size(task_bytes: int) -> int:
    """Bytes per range on the fast path: a 64th of the task (positions advance by whole ranges), from
    ``CHUNK_BYTES`` (64 KiB, as on the other path) to ``byte_ranges.RANGE_SIZE`` (1 MiB: fewer, larger
    splices; with a 1 MiB pipe, a range per pipe). Up to ``BUFFER_CHUNKS`` ranges are read ahead:
    only their positions, unless their lines had to change (``\r\n``), then their bytes too."""
    return min(byte_ranges.RANGE_SIZE, max(CHUNK_BYTES, task_bytes // 64))


class _Range:
    """Framed records that are bytes ``[offset, offset + length)`` of an open file (``byte_ranges.framed_ranges``)."""

    __slots__ = ("file", "offset", "length", "raw")

    def __init__(self, file: BinaryIO, offset: int, length: int, raw: bool):
        self.file, self.offset, self.length, self.raw = file, offset, length, raw


class _TaskFeed:
    def __init__(self, assignment: dict[str, Any]):
        self.assignment = assignment
        self.id = str(assignment["task_id"])
        self.skip = int(assignment.get("skip", 0))
        self.lines = str(assignment["format"]) in formats.LINE_FORMATS  # framed as lines, else length-prefixed
        self.records = self.skip  # confirmed position
        self.bytes = 0
        self.read_done = False  # the reader is finished with it
        self.written_end: int | None = None  # stream offset after its last chunk, once written
        self.error: str | None = None
        self.written_records = self.skip  # position after the last chunk handed to the writer
        self.committed_done = False  # exactly-once: every record committed
        self.file: BinaryIO | None = None  # fast path: open until the writer is done with the task
        # A Kafka partition: read by a thread of its own (a stream does not end), its offsets by count;
        # revoked: the AM moves it elsewhere, so reading stops and it is handed back once consumed.
        self.offsets = (kafka_reader.OffsetMap(self.skip, int(assignment["start"]))
                        if assignment.get("kafka") else None)
        self.revoked = False
        # A WebHDFS text task: its stream read ahead from the moment it is assigned (see _read_ahead).
        self.read_ahead: streaming.ReadAhead | None = None


Chunk = Any  # bytes | memoryview | _Range: what the writer puts into the pipe at once


class _Segment:
    """One chunk as written: stream bytes [start, start + nbytes) hold stream records [first, last), the
    task's records [task_first, task_last). ``data``: the chunk itself (None under exactly-once, where
    positions come from commits), to find the record boundaries inside it when the trainer dies."""

    __slots__ = ("start", "first", "last", "task", "task_first", "task_last", "nbytes", "final", "data")

    def __init__(self, start: int, first: int, last: int, task: _TaskFeed, task_first: int, task_last: int,
                 nbytes: int, final: bool, data: Chunk | None):
        self.start, self.first, self.last, self.task = start, first, last, task
        self.task_first, self.task_last, self.nbytes, self.final = task_first, task_last, nbytes, final
        self.data = data

    @property
    def end(self) -> int:
        return self.start + self.nbytes

    def whole_records(self, upto: int) -> tuple[int, int]:
        """The records of this chunk that end within its first ``upto`` bytes: (count, framed bytes)."""
        data = self.data
        if data is None or upto <= 0:
            return 0, 0
        if isinstance(data, _Range):
            if data.raw:
                return _raw_records_within(data.length, upto)
            data = _read_range(self.task, data, upto)
        return _lines_within(data, upto) if self.task.lines else _prefixed_within(data, upto)


def _framed_size(data: Chunk) -> int:
    """Bytes the chunk puts into the pipe."""
    if isinstance(data, _Range):
        return byte_ranges.raw_framed_length(data.length) if data.raw else data.length
    return len(data)


def _lines_within(data: bytes | memoryview, upto: int) -> tuple[int, int]:
    head = bytes(data[:upto])
    return head.count(b"\n"), head.rfind(b"\n") + 1


def _prefixed_within(data: bytes | memoryview, upto: int) -> tuple[int, int]:
    count = at = 0
    upto = min(upto, len(data))
    while at + 4 <= upto:
        after = at + 4 + _RAW_LENGTH.unpack_from(data, at)[0]
        if after > upto:
            break
        count, at = count + 1, after
    return count, at


def _raw_records_within(length: int, upto: int) -> tuple[int, int]:
    """Raw ranges: a 4-byte length before each ``formats.RAW_CHUNK`` bytes of the file."""
    count = at = 0
    while length > 0 and at + 4 + min(length, formats.RAW_CHUNK) <= upto:
        size = min(length, formats.RAW_CHUNK)
        count, at, length = count + 1, at + 4 + size, length - size
    return count, at


def _read_range(task: _TaskFeed, span: _Range, upto: int) -> bytes:
    """The first ``upto`` bytes of a range spliced from the task's file (read again: the writer closed it
    after the task); nothing if it cannot be read, which counts none of its records."""
    try:
        with open_input(str(task.assignment["url"])) as f:
            return os.pread(f.fileno(), min(upto, span.length), span.offset)
    except OSError as exc:
        log.warning("task %s: cannot read back the records the trainer took (%s): counting none of them",
                    task.id, exc)
        return b""


def create_position_file(path: str) -> None:
    """The read-position file ``data.reader`` writes, [in use, records done]: zero until it reads.
    Made before the trainer starts, so that its reader finds it."""
    with open(path, "wb") as f:
        f.write(bytes(16))


def _position_view(path: str) -> memoryview:
    with open(path, "r+b") as f:
        return memoryview(mmap.mmap(f.fileno(), 16)).cast("Q")


def open_input(url: str) -> BinaryIO:
    """A local path, ``file://`` or ``webhdfs://host:port`` URL (the AM hands out ``hdfs://`` inputs as
    such), opened for reading."""
    if url.startswith("file://"):
        url = url[len("file://"):]
    elif url.startswith("webhdfs://"):
        return cast(BinaryIO, webhdfs.WebHDFSFile(url))
    elif "://" in url:
        scheme = url.split("://", 1)[0]
        raise OSError(f"{scheme}:// input cannot be read by this executor (local files, file:// and "
                      f"webhdfs:// only): {url}")
    return open(url, "rb")


class FeedRate:
    """Bytes and records per second over the last ``window`` seconds, from running totals sampled
    at each report (at least the two latest samples, however far apart)."""

    def __init__(self, window: float = RATE_WINDOW):
        self.window = window
        self._samples: collections.deque[tuple[float, int, int]] = collections.deque()

    def sample(self, now: float, nbytes: int, records: int) -> tuple[float, float]:
        samples = self._samples
        samples.append((now, nbytes, records))
        while len(samples) > 2 and now - samples[1][0] >= self.window:
            samples.popleft()
        then, bytes_then, records_then = samples[0]
        if now <= then:
            return 0.0, 0.0
        return (nbytes - bytes_then) / (now - then), (records - records_then) / (now - then)


class Feeder:
    """Reads assigned tasks into the trainer's stdin; reports positions on heartbeats."""

    def __init__(self, stdin: IO[bytes], max_tasks: int, readers: int = 1,
                 wake: threading.Event | None = None, reader_group: int | None = None,
                 commit_file: str | None = None, position_file: str | None = None,
                 trainer_buffer: int = TRAINER_BUFFER):
        self.stdin = stdin
        self.trainer_buffer = trainer_buffer
        self.commit_file = commit_file  # exactly-once: where the trainer commits, None = at-least-once
        self.position = _position_view(position_file) if commit_file is None and position_file else None
        self._commit_offset = 0
        self.checkpoint: str | None = None
        self.committed_records = 0
        self.total_records = 0
        self.segments: collections.deque[_Segment] = collections.deque()
        self.fd = stdin.fileno()
        self._probe: int | None = self.fd  # the end of the pipe FIONREAD is asked on (see _close_stdin)
        self._read_end: int | None = None
        self.reader_group = reader_group  # process group of the trainer (who reads the pipe)
        self._readers: list[int] = []  # pids of that group reading the pipe, as last found
        self._readers_at = 0.0
        self.pipe = f"pipe:[{os.fstat(self.fd).st_ino}]"
        self.max_tasks = max_tasks
        self.wake = wake or threading.Event()
        self.lock = threading.Lock()
        self.tasks: dict[str, _TaskFeed] = collections.OrderedDict()
        self.todo: queue.Queue[_TaskFeed | None] = queue.Queue()
        self.buffer: queue.Queue[tuple[_TaskFeed, bytes | memoryview | _Range, int, int, bool] | None] = queue.Queue(BUFFER_CHUNKS)
        self._splice = hasattr(os, "splice")
        if _F_SETPIPE_SZ is not None:
            try:
                fcntl.fcntl(self.fd, _F_SETPIPE_SZ, PIPE_BYTES)
            except OSError:  # not a pipe, or above /proc/sys/fs/pipe-max-size: keep its size
                pass
        self.total_written = 0  # bytes in the pipe so far: counted as each write or splice returns
        self.last_write = time.monotonic()
        self._empty_since: float | None = None  # when the pipe was first seen empty, nothing written since
        self._writing = False  # the writer is in a write or splice into the pipe
        self.rate = FeedRate()
        self.exhausted = False
        self.closed = False
        self.closed_at: float | None = None  # when the trainer's stdin was closed because the input ended
        # Tasks assigned once the pipe was closed (none should come: a closed feed asks for none): they
        # can never be fed, so the next report hands them back at once rather than hold them to the end.
        self._refused: list[str] = []
        self.broken = False  # the trainer closed its end
        self.draining = False  # a preemption notice: nothing more is written (see drain)
        self.drained_eof = False  # draining, the trainer took everything written and its stdin was closed
        self._threads = [threading.Thread(target=self._read_loop, name=f"primus-feed-reader-{i}", daemon=True)
                         for i in range(max(1, readers))]
        self._threads.append(threading.Thread(target=self._write_loop, name="primus-feed-writer", daemon=True))
        for thread in self._threads:
            thread.start()

    # --- the heartbeat side (executor main thread) ---

    def report(self, everything_consumed: bool = False, final: bool = False) -> dict[str, Any]:
        """The data part of the next heartbeat. ``everything_consumed``: the trainer exited 0 after EOF;
        ``final``: the trainer is gone (its last positions, taken now rather than at the last heartbeat)."""
        if final:
            self._settle_writer()
        with self.lock:
            progress: dict[str, dict[str, int]] = {}
            done: list[str] = []
            released: list[str] = []
            failed: dict[str, str] = {}
            written, unread = self._pipe_state()
            everything_consumed = everything_consumed and not unread  # it exited 0 after EOF, the pipe empty
            done_with = self._records_done(unread, final)
            # Before positions move: the chunk the trainer took its last byte from is still logged.
            reading = self.segments[0].task.id if done_with is not None and self.segments else \
                self._reading(written, unread)
            if self.commit_file is not None:
                self._read_commits()
                self._apply_commits(self.total_records if everything_consumed else self.committed_records)
            elif done_with is not None:
                self._apply_commits(self.total_records if everything_consumed else done_with)
            elif everything_consumed:
                self._apply_offset(written, exact=False)
            else:
                self._apply_offset(self._confirmed_offset(written, unread, final), exact=final)
            for task in self.tasks.values():
                progress[task.id] = {"records": task.records, "bytes": task.bytes}
                if task.offsets is not None:
                    progress[task.id].update(offset=task.offsets.offset_at(task.records),
                                             time=task.offsets.time_at(task.records))
                    task.offsets.forget_before(task.records)
                if task.committed_done:
                    if task.error is not None:
                        failed[task.id] = task.error
                    elif task.revoked:
                        released.append(task.id)
                    else:
                        done.append(task.id)
            released += self._refused
            report: dict[str, Any] = {
                "need_tasks": 0 if self.closed or self.exhausted or self.broken or self.draining
                else max(0, self.max_tasks - self._in_flight()),
                "held": list(self.tasks), "progress": progress, "done": done, "failed": failed,
                "released": released}
            if reading is not None:
                report["reading"] = reading
            if self.checkpoint is not None:
                report["commit"] = {"checkpoint": self.checkpoint, "records": self.committed_records}
            report["feed"] = self._feed_stats()
            return report

    def _settle_writer(self, patience: float = 1.0) -> None:
        """Wait (a little) for a write in progress to return: one blocked on the full pipe of a trainer
        that died returns what it had put in the pipe, uncounted until then, which would make the
        trainer look that much behind (fed again). A pipe someone else still reads may keep it."""
        deadline = time.monotonic() + patience
        while self._writing and time.monotonic() < deadline:
            time.sleep(0.002)

    def _feed_stats(self) -> dict[str, float]:
        """Throughput into the pipe, and the share of the read-ahead buffer in use (the lock held)."""
        bytes_per_s, records_per_s = self.rate.sample(time.monotonic(), self.total_written, self.total_records)
        fill = min(1.0, self.buffer.qsize() / self.buffer.maxsize)
        return {"bytes_per_s": round(bytes_per_s, 1), "records_per_s": round(records_per_s, 1),
                "buffer_fill": round(fill, 3)}

    def _in_flight(self) -> int:
        """Tasks that count against ``max_tasks``. At-least-once: every task not done, also one whose
        records all sit in the pipe (a crash returns it too). Exactly-once: only tasks still being fed,
        since a task stays held until the trainer commits, which it may do only after more records."""
        files = [t for t in self.tasks.values() if t.offsets is None]  # a stream (Kafka) never ends
        if self.commit_file is not None:
            return sum(1 for t in files if t.written_end is None)
        return sum(1 for t in files if not t.committed_done)

    def room(self) -> bool:
        """Whether a task held is now read to its end: reporting it done makes room for another."""
        if self.commit_file is not None:
            return self.wake.is_set()
        with self.lock:
            written, unread = self._pipe_state()
            done_with = self._records_done(unread)
            if done_with is not None:
                return bool(self.segments) and self.segments[0].final and self.segments[0].last <= done_with
            confirmed = self._confirmed_offset(written, unread)
            return any(t.written_end is not None and t.written_end <= confirmed and not t.committed_done
                       for t in self.tasks.values())

    def _reading(self, written: int, unread: int | None) -> str | None:
        """The task of the last byte the trainer took from the pipe: the one it was reading."""
        if unread is None:
            return None
        taken = written - unread
        for seg in self.segments:
            if seg.start < taken <= seg.end:
                return seg.task.id
        return None

    def _read_commits(self) -> None:
        """The trainer's latest commit: ``{"checkpoint", "records"}`` lines appended to the commit file."""
        assert self.commit_file is not None
        try:
            with open(self.commit_file, "rb") as f:
                f.seek(self._commit_offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line still being written is read next time
        for line in data[:end].splitlines():
            try:
                entry = json.loads(line)
                records = int(entry["records"])
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a malformed commit line: %r", line[:200])
                continue
            if records >= self.committed_records:
                self.committed_records = min(records, self.total_records)
                self.checkpoint = str(entry.get("checkpoint", ""))
        self._commit_offset += end

    def _apply_commits(self, upto: int) -> None:
        """Task positions from the first ``upto`` records of the stream."""
        while self.segments and self.segments[0].last <= upto:
            self._consumed(self.segments.popleft())
        if self.segments and self.segments[0].first < upto:
            seg = self.segments[0]
            seg.task.records = seg.task_first + (upto - seg.first)

    def _apply_offset(self, offset: int, exact: bool) -> None:
        """Task positions from the first ``offset`` bytes of the stream: the chunks wholly before it, and
        when ``exact`` (the trainer is gone: this is the last word) the records before it inside the next
        one too (reading them back costs a pread or a count, once)."""
        while self.segments and self.segments[0].end <= offset:
            self._consumed(self.segments.popleft())
        if exact and self.segments and self.segments[0].start < offset:
            seg = self.segments[0]
            records, nbytes = seg.whole_records(offset - seg.start)
            if records:
                seg.task.records = seg.task_first + min(records, seg.task_last - seg.task_first)
                seg.task.bytes += nbytes

    @staticmethod
    def _consumed(seg: _Segment) -> None:
        seg.task.records, seg.task.bytes = seg.task_last, seg.task.bytes + seg.nbytes
        seg.task.committed_done = seg.final

    def reported(self, report: dict[str, Any], reply: dict[str, Any]) -> None:
        """The AM took ``report``; ``reply`` may assign tasks or say the input is exhausted."""
        with self.lock:
            for task_id in list(report["done"]) + list(report["failed"]) + list(report.get("released", ())):
                self.tasks.pop(task_id, None)
                if task_id in self._refused:
                    self._refused.remove(task_id)
            for task_id in reply.get("revoke") or ():
                if task_id in self.tasks:
                    self.tasks[task_id].revoked = True
            for assignment in reply.get("tasks") or ():
                if str(assignment["task_id"]) in self.tasks:
                    continue
                if self.closed:
                    if str(assignment["task_id"]) not in self._refused:
                        self._refused.append(str(assignment["task_id"]))
                    continue
                task = _TaskFeed(assignment)
                self.tasks[task.id] = task
                task.read_ahead = _read_ahead(assignment)
                if task.offsets is not None:
                    thread = threading.Thread(target=self._read_task, args=(task,), daemon=True,
                                              name=f"primus-feed-stream-{task.id}")
                    self._threads.append(thread)
                    thread.start()
                else:
                    self.todo.put(task)
            self.exhausted = bool(reply.get("data_exhausted"))
            if self.exhausted and (not self.tasks or (self.commit_file is not None and all(
                    t.written_end is not None for t in self.tasks.values()))):
                self._close()

    def _records_done(self, unread: int | None, final: bool = False) -> int | None:
        """Records the trainer is done with, as ``data.reader.records()`` publishes them; None when it
        does not read through it (positions then come from the pipe). The reader publishes a record as
        done when the trainer asks for the next one, so a trainer waiting on an empty pipe is done with
        everything written."""
        if self.position is None or self.position[0] != 1:
            return None
        if not final and self._took_all(unread):
            return self.total_records
        return min(int(self.position[1]), self.total_records)

    def _pipe_state(self) -> tuple[int, int | None]:
        """(bytes written into the pipe, bytes of them the trainer has not taken yet; None if the pipe
        cannot be asked). The count comes first: a write landing in between makes the trainer look
        behind (more of the pipe unread than written since), never ahead."""
        written = self.total_written
        if self.drained_eof:
            return written, 0  # a drain closed the pipe once the trainer had taken everything
        if self._probe is None:
            return written, None
        try:
            return written, int(struct.unpack("i", fcntl.ioctl(self._probe, termios.FIONREAD, b"\0\0\0\0"))[0])
        except OSError:
            return written, None

    def _confirmed_offset(self, written: int, unread: int | None, final: bool = False) -> int:
        """The stream offset up to which the trainer has consumed what it read: what it took from the
        pipe, less what its own read buffer may hold; everything written when it is seen done with all
        (not when ``final``: it is gone, the pipe says how far it got)."""
        if unread is None:
            return -1
        if not final and self._took_all(unread):
            return written
        return written - unread - self.trainer_buffer

    def _took_all(self, unread: int | None) -> bool:
        """Whether the trainer is done with everything written: the pipe is empty and a process of
        the trainer blocked reading it, or (where that cannot be seen) it has been seen empty for
        ``QUIET_SECONDS`` with nothing written since: counted from when it was first seen empty,
        not from the last write, as the trainer may have taken its last bytes long after that."""
        if unread != 0 or self.closed_at is not None or self.drained_eof:  # after EOF it never waits on the pipe
            self._empty_since = None
            return False
        now = time.monotonic()
        if self._empty_since is None or self._empty_since < self.last_write:
            self._empty_since = now
        return self._reader_waiting() or now - self._empty_since >= QUIET_SECONDS

    def _reader_waiting(self) -> bool:
        """Whether a process of the trainer's group is blocked reading the (empty) pipe.

        Finding the processes that read the pipe walks all of /proc (milliseconds, with the GIL
        held, while reports may come every few ms as the pipe runs empty): it is done at most every
        ``READERS_REFRESH`` seconds, and in between only the readers found last are looked at."""
        if self.reader_group is None:
            return False
        now = time.monotonic()
        if not self._readers or now - self._readers_at >= READERS_REFRESH:
            self._readers, self._readers_at = self._pipe_readers(), now
        for pid in self._readers:
            if procfs.fd_target(pid, 0) != self.pipe:  # gone (its pid maybe reused)
                continue
            # pipe_read, anon_pipe_read, pipe_wait (older kernels)
            if "pipe" in (procfs.wchan(pid) or ""):
                return True
        return False

    def _pipe_readers(self) -> list[int]:
        """The pids of the trainer's group whose stdin is the pipe."""
        return [pid for pid, found in procfs.all_stats().items()
                if found.pgrp == self.reader_group and procfs.fd_target(pid, 0) == self.pipe]

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            self.closed_at = time.monotonic()
            log.info("input exhausted: closing the trainer's stdin")
            self.buffer.put(None)  # the writer closes the pipe after what it has

    def drain(self) -> None:
        """Feed nothing more (a preemption notice). The writer stops after the chunk it is writing, so
        the trainer's stream ends at a record boundary, and closes the pipe once the trainer has taken
        all of it: a trainer waiting for its next record then reads EOF (and checkpoints and exits)
        rather than wait for SIGKILL, and its positions are still known (nothing was left unread)."""
        self.draining = True
        self.stop()
        try:
            self.buffer.put_nowait(None)  # wakes a writer waiting for data; a full buffer wakes it anyway
        except queue.Full:
            pass

    def stop(self) -> None:
        with self.lock:
            self.closed = True
            for _ in self._threads:
                self.todo.put(None)
            for task in self.tasks.values():
                if task.read_ahead is not None:
                    task.read_ahead.close()

    # --- threads ---

    def _read_loop(self) -> None:
        while True:
            task = self.todo.get()
            if task is None:
                return
            self._read_task(task)

    def _read_task(self, task: _TaskFeed) -> None:
        error = None
        records, nbytes = task.skip, 0
        a = task.assignment
        fmt = str(a["format"])
        try:
            streamed = _streamed(a)  # read once, front to back: no pread
            if task.offsets is not None:
                stopped = lambda: self.closed or self.broken or task.revoked  # noqa: E731
                for framed, count in kafka_reader.read_partition(a, task.offsets, stopped, lines=fmt == "jsonl"):
                    records = count
                    nbytes += len(framed)
                    self._put(task, framed, records, nbytes, False)
                if self.closed or self.broken:
                    return
            elif fmt in byte_ranges.RANGE_FORMATS and a["compression"] == "none" and hasattr(os, "pread") and \
                    not streamed:
                # Byte ranges of whole records, moved file -> pipe by the writer (os.splice).
                f = task.file = open_input(str(a["url"]))  # the writer closes it after the task
                raw = fmt == "raw"
                start, end = int(a["start"]), int(a["end"])
                for offset, length, block, count in byte_ranges.framed_ranges(
                        f.fileno(), fmt, start, end, task.skip, _range_size(end - start)):
                    records = count
                    if block is None:
                        nbytes += byte_ranges.raw_framed_length(length) if raw else length
                        self._put(task, _Range(f, offset, length, raw), records, nbytes, False)
                    else:
                        nbytes += len(block)
                        self._put(task, block, records, nbytes, False)
                    if self.closed or self.broken:
                        return
            else:
                with open_input(str(a["url"])) as f:
                    # Framed blocks that never cut a record; for text no Python work per line.
                    start, end = int(a["start"]), int(a["end"])
                    blocks: Iterator[tuple[bytes | memoryview, int]]
                    if task.read_ahead is not None:
                        # A WebHDFS stream: large reads, each block fed as it was read (one copy), read
                        # ahead on a connection of its own while this thread counts the lines.
                        blocks = streaming.streamed_lines(None, start, end, task.skip, task.read_ahead.step,
                                                        blocks=task.read_ahead)
                    else:  # blocks of about CHUNK_BYTES
                        blocks = read_framed(f, fmt, str(a["compression"]), start, end, task.skip)
                    for data, count in blocks:
                        records = count  # position in the split, skipped records included
                        nbytes += len(data)
                        self._put(task, data, records, nbytes, False)
                        if self.closed or self.broken:
                            return
        except Exception as exc:  # noqa: BLE001 - any reader error is reported as the task's failure
            error = f"{a['url']}: {type(exc).__name__}: {exc}"
            log.warning("task %s failed: %s", task.id, error)
        finally:
            if task.read_ahead is not None:
                task.read_ahead.close()
        with self.lock:
            task.read_done = True
            task.error = error
        self._put(task, b"", records, nbytes, True)

    def _put(self, task: _TaskFeed, data: bytes | memoryview | _Range, records: int, nbytes: int, last: bool) -> None:
        while not (self.closed or self.broken):
            try:
                self.buffer.put((task, data, records, nbytes, last), timeout=0.5)
                return
            except queue.Full:
                continue

    def _write_loop(self) -> None:
        while True:
            item = self.buffer.get()
            if self.draining:
                self._end_drained_stream()
                return
            if item is None:
                break
            task, data, records, nbytes, last = item
            with self.lock:
                seg = self._log_chunk(task, data, records, last)
            self._writing = True
            try:
                if isinstance(data, _Range):
                    self._write_range(data)
                else:
                    self._write(data)
            except _FileShrank as exc:  # what is in the pipe ends mid-record: the trainer must not go on
                log.error("task %s: %s: closing the trainer's stdin", task.id, exc)
                with self.lock:
                    self.broken = True
                break
            except OSError as exc:  # EPIPE: the trainer is gone; the executor reports its exit
                log.warning("trainer's stdin closed (%s): feeding stops", exc)
                with self.lock:
                    self.broken = True
                return
            finally:
                self._writing = False
                if last and task.file is not None:
                    task.file.close()
            with self.lock:
                self.last_write = time.monotonic()
                self.total_records = seg.last
                if last:
                    task.written_end = seg.end
            if last:
                self.wake.set()  # room for another task: heartbeat soon
        self._close_stdin()

    def _log_chunk(self, task: _TaskFeed, data: Chunk, records: int, last: bool) -> _Segment:
        """Log a chunk before it is written (the lock held): while it is written, the trainer may
        already take and consume some of its records. Records count as written (``total_records``)
        once all of it is; its bytes, as each write returns (``total_written``)."""
        seg = _Segment(self.total_written, self.total_records, self.total_records + records - task.written_records,
                       task, task.written_records, records, _framed_size(data), last,
                       data if self.commit_file is None else None)
        self.segments.append(seg)
        task.written_records = records
        return seg

    def _close_stdin(self) -> None:
        """Close the trainer's stdin (it reads EOF once it has taken what is in the pipe), keeping a read
        end of the pipe to ask how much of it is unread: a trainer that dies after EOF leaves that much
        to feed again. The read end is opened through /proc (the write end is all this process has),
        close-on-exec so that no child inherits it; it is never read from (that would take the trainer's
        records), and holding it does not delay EOF (which comes when every write end is closed)."""
        with self.lock:
            if self._probe != self.fd:
                return
            self._read_end = _open_read_end(self.fd)
            self._probe = self._read_end
            try:
                self.stdin.close()
            except OSError:
                pass

    def close(self) -> None:
        """Forget the pipe (the trainer's last positions were reported): close the read end kept."""
        with self.lock:
            if self._read_end is not None:
                os.close(self._read_end)
            self._read_end = self._probe = None

    def _end_drained_stream(self) -> None:
        """Draining: close the trainer's stdin once it took everything written (never, if it is gone)."""
        while not self.broken and self._pipe_state()[1] != 0:
            time.sleep(0.05)
        self._close_stdin()
        with self.lock:
            self.drained_eof = True

    def _write(self, data: bytes | memoryview) -> int:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            self.total_written += written  # only this thread adds; in the pipe now
            view = view[written:]
        return len(data)

    def _write_range(self, span: _Range) -> int:
        """Moves the range's bytes from the file into the pipe (framed first when raw); bytes written."""
        fd = span.file.fileno()
        if not span.raw:
            self._move(fd, span.offset, span.length)
            return span.length
        end = span.offset + span.length
        for at in range(span.offset, end, formats.RAW_CHUNK):
            length = min(formats.RAW_CHUNK, end - at)
            self._write(_RAW_LENGTH.pack(length))
            self._move(fd, at, length)
        return byte_ranges.raw_framed_length(span.length)

    def _move(self, fd: int, offset: int, length: int) -> None:
        while length:
            if self._splice:
                try:
                    moved = os.splice(fd, self.fd, length, offset_src=offset)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                    log.info("os.splice is refused here (%s): writing what is read instead", exc)
                    self._splice = False
                    continue
                self.total_written += moved
            else:
                data = os.pread(fd, min(length, 1024 * 1024), offset)
                moved = len(data) and self._write(data)
            if moved == 0:
                raise _FileShrank(f"the input file ended before byte {offset + length} (did it shrink while read?)")
            offset += moved
            length -= moved


class _FileShrank(Exception):
    pass


def _open_read_end(fd: int) -> int | None:
    """A new read end of the pipe ``fd`` is the write end of (Linux: opening /proc/self/fd/N opens the
    pipe itself); None if it is not a pipe or /proc is not there (the unread part is then unknown)."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        log.info("no read end of the trainer's stdin (%s): once it is closed, what it left unread is unknown", exc)
        return None
