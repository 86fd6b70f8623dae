"""Reading the input Primus feeds a trainer, from inside the trainer (standard library only).

A role with ``consumes_input: true`` gets its records on stdin, framed as
``PRIMUS_INPUT_FRAMING`` says: ``lines`` (text, jsonl, parquet rows as JSON: one record per
line) or ``length_prefixed`` (raw, tfrecord, length_delimited: a 4-byte big-endian length,
then the record). ``records()`` undoes the framing::

    from primus_runtime.data.reader import records

    for record in records():      # bytes, until Primus closes stdin (the input is done)
        train_on(record)

``torch_dataset()`` wraps the same iterator as a ``torch.utils.data.IterableDataset``
(use it with ``num_workers=0``: there is one stdin).

While it reads stdin, ``records()`` tells the executor how many records the trainer is done
with (every record before the one it just asked for) through a small shared file
(``$PRIMUS_READ_POSITION_FILE``): a trainer that dies then resumes after exactly those, not
after a safety margin of the pipe (at-least-once duplicates: the one record in hand).

With ``delivery: exactly_once``, call ``commit(checkpoint_id)`` right after saving a model
checkpoint: the records read so far (through ``records()``) count as consumed, and a
replacement trainer resumes after them; it finds the checkpoint to load in
``restore_checkpoint()``. A trainer in another language appends the same line,
``{"checkpoint": "<id>", "records": <records read from stdin so far>}``, to
``$PRIMUS_DATA_COMMIT_FILE``.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import sys
from collections.abc import Iterator
from typing import IO, Any

FRAMING_ENV = "PRIMUS_INPUT_FRAMING"
COMMIT_FILE_ENV = "PRIMUS_DATA_COMMIT_FILE"
RESTORE_ENV = "PRIMUS_RESTORE_CHECKPOINT"
POSITION_ENV = "PRIMUS_READ_POSITION_FILE"
_consumed = 0  # records yielded by records() in this process
_LENGTH = struct.Struct(">I")


class TruncatedRecord(EOFError):
    """The stream ended inside a length-prefixed record."""


def _position() -> memoryview | None:
    """The executor's read-position file as two unsigned 64-bit words: [in use, records done]."""
    path = os.environ.get(POSITION_ENV)
    if not path:
        return None
    try:
        with open(path, "r+b") as f:
            view = memoryview(mmap.mmap(f.fileno(), 16)).cast("Q")
    except (OSError, ValueError):  # not there, or not ours: positions then come from the pipe
        return None
    view[1] = _consumed
    view[0] = 1
    return view


def records(stream: IO[bytes] | None = None, framing: str | None = None) -> Iterator[bytes]:
    """Every record on ``stream`` (default: stdin), without its framing, until EOF."""
    position = _position() if stream is None or stream is sys.stdin.buffer else None
    stream = stream if stream is not None else sys.stdin.buffer
    framing = framing or os.environ.get(FRAMING_ENV, "lines")
    global _consumed
    if framing == "lines":
        for line in stream:
            if position is not None:
                position[1] = _consumed  # asking for this record: the ones before it are done
            _consumed += 1
            yield line[:-1] if line.endswith(b"\n") else line
        if position is not None:
            position[1] = _consumed
    elif framing == "length_prefixed":
        while True:
            if position is not None:
                position[1] = _consumed  # asking for the next record: the ones before it are done
            header = stream.read(4)
            if not header:
                return
            if len(header) < 4:
                raise TruncatedRecord(f"input ended inside a record header ({len(header)} of 4 bytes)")
            (size,) = _LENGTH.unpack(header)
            record = stream.read(size)
            if len(record) < size:
                raise TruncatedRecord(f"input ended inside a record ({len(record)} of {size} bytes)")
            _consumed += 1
            yield record
    else:
        raise ValueError(f"{FRAMING_ENV} must be 'lines' or 'length_prefixed', got {framing!r}")


def commit(checkpoint: str) -> int:
    """Exactly-once: the records read so far are consumed, with model checkpoint ``checkpoint``
    saved; the number of records committed. Call it right after the checkpoint is durable."""
    path = os.environ.get(COMMIT_FILE_ENV)
    if not path:
        raise RuntimeError(f"{COMMIT_FILE_ENV} is not set: the job's input is not delivered exactly once")
    line = json.dumps({"checkpoint": str(checkpoint), "records": _consumed}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return _consumed


def restore_checkpoint() -> str | None:
    """Exactly-once: the checkpoint this trainer should load before reading (None: start fresh)."""
    return os.environ.get(RESTORE_ENV) or None


def torch_dataset(stream: IO[bytes] | None = None, framing: str | None = None) -> Any:
    """The records as a ``torch.utils.data.IterableDataset`` (needs torch)."""
    from torch.utils.data import IterableDataset

    class PrimusInput(IterableDataset):  # type: ignore[misc]
        def __iter__(self) -> Iterator[bytes]:
            return records(stream, framing)

    return PrimusInput()
