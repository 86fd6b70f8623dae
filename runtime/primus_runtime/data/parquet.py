"""Parquet input: splits are row-group ranges, a record is one row as a JSON object on one line.

Standard library only at import time, Python 3.9+: ``pyarrow`` is imported by the functions
that need it (under ``-S``, the executor, found through ``with_site_packages``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from .formats import CorruptRecord, Split
from .site_packages import with_site_packages


def _parquet() -> Any:
    with_site_packages()
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("parquet input needs the 'pyarrow' package (pip install pyarrow)") from exc
    return pq


def _parquet_file(fileobj: IO[bytes]) -> Any:
    pq = _parquet()
    import pyarrow as pa

    try:
        return pq.ParquetFile(fileobj)
    except pa.ArrowInvalid as exc:
        raise CorruptRecord(0, f"not a readable parquet file: {exc}") from exc


def plan_parquet(opener: Callable[[], IO[bytes]], target_bytes: int) -> list[Split]:
    with opener() as fileobj:
        meta = _parquet_file(fileobj).metadata
        sizes = []
        for index in range(meta.num_row_groups):
            group = meta.row_group(index)
            sizes.append(sum(group.column(c).total_compressed_size for c in range(group.num_columns)))
    splits = []
    start = 0
    gathered = 0
    for index, size in enumerate(sizes):
        gathered += size
        if gathered >= target_bytes:
            splits.append(Split(start, index + 1))
            start = index + 1
            gathered = 0
    if start < len(sizes):
        splits.append(Split(start, len(sizes)))
    return splits


def _json_value(value: Any) -> Any:
    """How a parquet value that JSON has no type for is written: dates ISO 8601, bytes base64."""
    if isinstance(value, (bytes, bytearray)):
        import base64

        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def read_parquet(fileobj: IO[bytes], start: int, end: int, skip: int) -> Iterator[tuple[bytes, int]]:
    parquet_file = _parquet_file(fileobj)
    meta = parquet_file.metadata
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_json_value).encode
    n = 0
    for group in range(start, min(end, meta.num_row_groups)):
        rows = meta.row_group(group).num_rows
        if n + rows <= skip:
            n += rows
            continue
        for batch in parquet_file.read_row_group(group).to_batches():
            for row in batch.to_pylist():
                n += 1
                if n > skip:
                    yield encode(row).encode(), n


def write_parquet(fileobj: IO[bytes], records: Iterable[bytes], row_group_rows: int) -> None:
    import pyarrow as pa

    table = pa.Table.from_pylist([json.loads(record) for record in records])
    _parquet().write_table(table, fileobj, row_group_size=row_group_rows)
