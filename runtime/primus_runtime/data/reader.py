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
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterator
from typing import IO, Any

FRAMING_ENV = "PRIMUS_INPUT_FRAMING"
_LENGTH = struct.Struct(">I")


class TruncatedRecord(EOFError):
    """The stream ended inside a length-prefixed record."""


def records(stream: IO[bytes] | None = None, framing: str | None = None) -> Iterator[bytes]:
    """Every record on ``stream`` (default: stdin), without its framing, until EOF."""
    stream = stream if stream is not None else sys.stdin.buffer
    framing = framing or os.environ.get(FRAMING_ENV, "lines")
    if framing == "lines":
        for line in stream:
            yield line[:-1] if line.endswith(b"\n") else line
    elif framing == "length_prefixed":
        while True:
            header = stream.read(4)
            if not header:
                return
            if len(header) < 4:
                raise TruncatedRecord(f"input ended inside a record header ({len(header)} of 4 bytes)")
            (size,) = _LENGTH.unpack(header)
            record = stream.read(size)
            if len(record) < size:
                raise TruncatedRecord(f"input ended inside a record ({len(record)} of {size} bytes)")
            yield record
    else:
        raise ValueError(f"{FRAMING_ENV} must be 'lines' or 'length_prefixed', got {framing!r}")


def torch_dataset(stream: IO[bytes] | None = None, framing: str | None = None) -> Any:
    """The records as a ``torch.utils.data.IterableDataset`` (needs torch)."""
    from torch.utils.data import IterableDataset

    class PrimusInput(IterableDataset):  # type: ignore[misc]
        def __iter__(self) -> Iterator[bytes]:
            return records(stream, framing)

    return PrimusInput()
