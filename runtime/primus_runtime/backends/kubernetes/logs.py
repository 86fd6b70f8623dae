"""Reading a container log from a byte offset, through an API that has none.

``pods/log`` reads a log from its start, or from ``sinceTime`` (whole seconds: the API server hands
the kubelet RFC 3339 without fractions), at most ``limitBytes``; with ``timestamps=true`` each line
starts with its time (RFC 3339 with nanoseconds) and a space. A ``LogCursor`` remembers, for one
log, a second ``since`` and the offset ``window_start`` of its first line at or after that second:
asking from that second again returns the log from exactly that offset, so a read at any offset at
or past it re-reads at most the lines of that one second, not the whole log. Both the AM
(``executors.py``, through ``api.KubeApi``) and the client (``client.py``, the ``kubernetes``
package) read logs this way.
"""

from __future__ import annotations

from dataclasses import dataclass

# Room for the timestamps in a reply limited to a number of log bytes (one prefix is 31 bytes).
TIMESTAMP_ROOM = 2.0
# A limited read asks for at least this much more: the pages that follow come from what it kept
# (paging through a second that wrote a lot would otherwise read that second again for each page).
READ_AHEAD = 1 << 20
KEPT_AT_MOST = 4 << 20  # log bytes a cursor keeps for the next reads


@dataclass(frozen=True)
class LogCursor:
    since: str  # RFC 3339, whole seconds: where the next read starts
    window_start: int  # the offset in the log of the first line at or after ``since``
    kept_start: int = 0  # the log from kept_start, as the last read decoded it
    kept: bytes = b""


@dataclass(frozen=True)
class LogRead:
    """What to ask the API for: ``since`` (None: from the start), ``limit_bytes`` (None: all), and
    how many log bytes of the answer come before the offset asked for (``skip``); or, when the
    offset is in what the last read decoded, its bytes from there (``kept``), without asking."""

    since: str | None
    skip: int
    limit_bytes: int | None
    kept: bytes | None = None


def plan(cursor: LogCursor | None, offset: int, limit: int | None) -> LogRead:
    """The read for ``limit`` bytes (None: all, up to the log's end) from ``offset`` (>= 0) with
    what ``cursor`` knows."""
    if cursor is not None and limit is not None and cursor.kept_start <= offset < cursor.kept_start + len(cursor.kept):
        start = offset - cursor.kept_start  # maybe fewer bytes than asked: the next read asks on from there
        return LogRead(cursor.since, 0, None, cursor.kept[start:start + limit])
    if cursor is not None and offset >= cursor.window_start:
        since, skip = cursor.since, offset - cursor.window_start
    else:
        since, skip = None, offset
    return LogRead(since, skip, None if limit is None else int((skip + max(limit, READ_AHEAD)) * TIMESTAMP_ROOM))


def take(data: bytes, read: LogRead, offset: int, limit: int | None,
         cursor: LogCursor | None) -> tuple[bytes, LogCursor | None]:
    """The log bytes from ``offset`` (at most ``limit``) in ``data`` (an answer to ``read``, with
    timestamps), and the cursor for the next read: the second of the last line seen, from the
    offset of its first line, and what this read decoded (the next pages may be in it)."""
    if read.kept is not None:
        return read.kept, cursor
    start = cursor.window_start if read.since is not None and cursor is not None else 0
    content: list[bytes] = []
    size = 0
    window: tuple[str, int] | None = None  # (second, offset of its first line) of the newest second seen
    for line in _lines(data):
        stamp, sep, text = line.partition(b" ")
        second = _second(stamp) if sep else None
        if second is None:
            break  # a line cut inside its timestamp (limitBytes): read again next time
        if window is None or window[0] != second:
            window = (second, start + size)
        content.append(text)
        size += len(text)
    log = b"".join(content)
    chunk = log[read.skip:] if limit is None else log[read.skip:read.skip + limit]
    if window is None:
        return chunk, cursor
    kept = log[read.skip:] if limit is not None and len(log) - read.skip <= KEPT_AT_MOST else b""
    return chunk, LogCursor(window[0], window[1], offset, kept)


def _lines(data: bytes) -> list[bytes]:
    """``data``'s lines with their ``\n`` (only ``\n`` ends a log line), the last one maybe unfinished."""
    *complete, last = data.split(b"\n")
    return [line + b"\n" for line in complete] + ([last] if last else [])


def _second(stamp: bytes) -> str | None:
    """``2026-12-05T07:16:47.123456789Z`` -> ``2026-12-05T07:16:47Z`` (None: not a timestamp)."""
    text = stamp.decode("ascii", errors="replace")
    if len(text) < 20 or text[4] != "-" or text[10] != "T" or not text.endswith("Z"):
        return None
    return text[:19] + "Z"
