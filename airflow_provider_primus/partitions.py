"""Time partitions of input paths: their names, where a partition's success marker is, and whether it exists.

Shared by ``PrimusPartitionSensor`` (poke), ``PrimusPartitionTrigger`` (deferred) and the asset
watcher's ``PrimusPartitionEventTrigger``. A path is read through the hdfs provider's
``WebHDFSHook`` when it is on HDFS, else on this machine. Light imports only: the triggerer
imports this module on its event loop.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from urllib.parse import urlparse

from airflow_provider_primus.templating import PARTITION_PLACEHOLDER

HDFS_SCHEMES = ("hdfs", "webhdfs")


def normalize_partition(value: str | dt.date | dt.datetime) -> str:
    """A partition as the runtime spells watermarks: ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH``.

    Accepts those, ``YYYYMMDD``, ``YYYYMMDDHH``, ISO datetimes (``{{ ts }}``) and date objects."""
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%dT%H")
    if isinstance(value, dt.date):
        return value.isoformat()
    text = str(value).strip()
    for fmt, out in (("%Y-%m-%d", "%Y-%m-%d"), ("%Y%m%d", "%Y-%m-%d"), ("%Y-%m-%dT%H", "%Y-%m-%dT%H"),
                     ("%Y%m%d%H", "%Y-%m-%dT%H")):
        try:
            return dt.datetime.strptime(text, fmt).strftime(out)
        except ValueError:
            pass
    try:
        return dt.datetime.fromisoformat(text).strftime("%Y-%m-%dT%H")
    except ValueError:
        raise ValueError(f"partition must be a date such as 2026-12-01, 20261201 or 2026-12-01T05, "
                         f"got {value!r}") from None


def expand_partition(template: str, partition: str) -> str:
    """Fill ``{{YYYY}}{{MM}}{{DD}}{{HH}}`` from a partition ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH``."""
    fields = {"YYYY": partition[0:4], "MM": partition[5:7], "DD": partition[8:10],
              "HH": partition[11:13] if len(partition) > 10 else None}

    def fill(match) -> str:
        value = fields[match.group(1)]
        if value is None:
            raise ValueError(f"path {template!r} has an {{{{HH}}}} placeholder but partition {partition!r} "
                             "has no hour (use e.g. '{{ ts }}' or 2026-12-01T05)")
        return value

    return PARTITION_PLACEHOLDER.sub(fill, template)


@dataclass(frozen=True)
class PartitionPath:
    """A partition's directory and the file that marks it complete (the directory itself when
    there is no marker); ``webhdfs_conn_id`` is set when it lives on HDFS."""

    directory: str
    marker_path: str
    webhdfs_conn_id: str | None

    @classmethod
    def of(cls, template: str, partition: str, success_marker: str | None,
           webhdfs_conn_id: str | None) -> PartitionPath:
        url = urlparse(expand_partition(template, partition))
        on_hdfs = url.scheme in HDFS_SCHEMES or webhdfs_conn_id is not None
        if url.scheme not in ("", "file", *HDFS_SCHEMES):
            raise ValueError(f"path: scheme {url.scheme!r} is not supported (use a local path, file://, "
                             f"hdfs:// or webhdfs://), got {template!r}")
        directory = url.path
        marker = directory.rstrip("/") + "/" + success_marker if success_marker else directory
        conn_id = (webhdfs_conn_id or "webhdfs_default") if on_hdfs else None
        return cls(directory, marker, conn_id)

    def describe(self) -> str:
        where = f"on HDFS (connection {self.webhdfs_conn_id})" if self.webhdfs_conn_id else "on the local filesystem"
        return f"{self.marker_path} {where}"


def partition_ready(target: PartitionPath) -> bool:
    """Whether the marker exists (blocking: triggers call it in a thread)."""
    return path_exists(target.marker_path, target.webhdfs_conn_id)


def path_exists(path: str, webhdfs_conn_id: str | None) -> bool:
    if webhdfs_conn_id is None:
        return os.path.exists(path)
    try:
        from airflow.providers.apache.hdfs.hooks.webhdfs import AirflowWebHDFSHookException, WebHDFSHook
    except ImportError:
        raise ImportError("reading partitions on HDFS needs the hdfs provider: "
                          "pip install 'airflow-provider-primus[hdfs]'") from None
    try:
        return bool(WebHDFSHook(webhdfs_conn_id=webhdfs_conn_id).check_for_path(path))
    except AirflowWebHDFSHookException as exc:  # no NameNode answered: a connection error, retried as one
        raise ConnectionError(f"WebHDFS connection {webhdfs_conn_id!r}: {exc}") from exc
