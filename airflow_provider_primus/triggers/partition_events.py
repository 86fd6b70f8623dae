"""An asset watcher's trigger: one event per new time partition, in time order.

``PrimusPartitionEventTrigger`` runs for as long as the asset is watched (it never ends by
itself). It looks for the success marker of the partition after the last one it announced and,
once it is there, fires an event carrying it, then looks for the next one at once: when several
are ready, each gets its own event, oldest first, and none is ever skipped (a partition that never
completes holds back the ones after it).

Where it left off survives a triggerer restart: the last partition announced is kept in Airflow
3.3's asset state store (``BaseEventTrigger.asset_state_store``, which the triggerer fills in for
a trigger run as an asset watcher) and a new run resumes after it. The store is written a few
seconds after the event was handed to the triggerer, once the triggerer has passed it on: a
triggerer killed in between fires that partition again after its restart (at least once), it
never loses one. Without a store (Airflow before 3.3) the position lives in memory only and a
restarted triggerer starts again from ``start``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

# Light imports only: the triggerer imports this module on its event loop (see triggers/__init__.py).
from airflow_provider_primus.partitions import PartitionPath, expand_partition, normalize_partition, partition_ready
from airflow_provider_primus.templating import PARTITION_PLACEHOLDER
from airflow_provider_primus.version_compat import AIRFLOW_V_3_3_PLUS
from primus_runtime.partitions import partition_hour, walk

#: The asset state store key holding the last partition announced (``YYYY-MM-DD`` / ``YYYY-MM-DDTHH``).
STATE_KEY = "primus_last_partition"
GRANULARITIES = ("day", "hour")
#: Longest wait between checks while the marker check or the state store keeps failing.
MAX_BACKOFF = 300.0


class PrimusPartitionEventTrigger(BaseEventTrigger):
    """Fires once per new time partition of ``path`` whose success marker appeared, for
    ``AssetWatcher``: ``Asset(..., watchers=[AssetWatcher(name=..., trigger=this)])``.

    Event payload (the asset event's ``extra["payload"]``): ``{"partition": "2026-12-01",
    "path": "/data/clicks/20261201"}`` (``YYYY-MM-DDTHH`` for hourly partitions; ``path`` is the
    template filled in, with its scheme).

    :param path: partition path template with the job spec's placeholders, e.g.
        ``/data/clicks/{{YYYY}}{{MM}}{{DD}}`` or ``hdfs:///logs/{{YYYY}}{{MM}}{{DD}}/{{HH}}``.
    :param start: the first partition to announce (``2026-12-01``, ``2026-12-01T05``, ``20261201``).
    :param granularity: ``day`` or ``hour``; default ``hour`` when the path holds ``{{HH}}``, else ``day``.
    :param poll_interval: seconds between checks while the next partition is not complete.
    :param success_marker: the file marking a partition complete; ``None``: the directory itself.
    :param webhdfs_conn_id: a ``webhdfs`` connection for a path on HDFS (an ``hdfs://`` or
        ``webhdfs://`` path uses ``webhdfs_default`` without it).
    :param state_asset: name of the asset keeping the position when several assets watch this
        same trigger; with one asset, that one.
    """

    #: Seconds between firing events and recording the last one in the asset state store: the
    #: triggerer passes events on about every second, so by then they are no longer only in memory.
    handover_seconds = 3.0

    def __init__(self, path: str, start: str, granularity: str | None = None, poll_interval: float = 60.0,
                 success_marker: str | None = "_SUCCESS", webhdfs_conn_id: str | None = None,
                 state_asset: str | None = None) -> None:
        super().__init__()
        if granularity is None:
            granularity = "hour" if "HH" in PARTITION_PLACEHOLDER.findall(path) else "day"
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
        if not poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0 seconds, got {poll_interval!r}")
        self.path, self.granularity, self.poll_interval = path, granularity, float(poll_interval)
        self.start = normalize_partition(start)
        self.success_marker, self.webhdfs_conn_id, self.state_asset = success_marker, webhdfs_conn_id, state_asset
        self._target(self._first_after(None))  # a bad scheme or an {{HH}} a day cannot fill fails here, not later

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", {
            "path": self.path, "start": self.start, "granularity": self.granularity,
            "poll_interval": self.poll_interval, "success_marker": self.success_marker,
            "webhdfs_conn_id": self.webhdfs_conn_id, "state_asset": self.state_asset,
        }

    # --- partitions -----------------------------------------------------------------

    def _upcoming(self, last: str | None) -> Iterator[str]:
        """Partition labels after ``last`` (from ``start`` on), in time order, endless."""
        first = self.start if last is None or last < self.start else last
        for label, _ in walk(partition_hour(first), None, (self.granularity,)):
            if last is None or label > last:
                yield label

    def _first_after(self, last: str | None) -> str:
        return next(self._upcoming(last))

    def _target(self, partition: str) -> PartitionPath:
        return PartitionPath.of(self.path, partition, self.success_marker, self.webhdfs_conn_id)

    def _event(self, partition: str) -> TriggerEvent:
        return TriggerEvent({"partition": partition, "path": expand_partition(self.path, partition)})

    # --- the asset state store --------------------------------------------------------

    def _store(self) -> Any:
        """The accessor of the watched asset's state (None before Airflow 3.3 or outside a watcher)."""
        if not AIRFLOW_V_3_3_PLUS:  # the attribute does not exist before 3.3
            return None
        stores = self.asset_state_store  # filled in by the triggerer for a run as an asset watcher
        if stores is None or self.state_asset is None:
            return stores
        from airflow.sdk import Asset

        try:
            return stores[Asset.ref(name=self.state_asset)]
        except KeyError:
            raise ValueError(f"state_asset: no asset of that name watches this trigger ({stores!r}), "
                             f"got {self.state_asset!r}") from None

    async def _load_last(self, store: Any) -> str | None:
        """The last partition announced before, from the store; retried until the store answers."""
        failures = 0
        while True:
            try:
                stored = await store.aget(STATE_KEY)
                break
            except ValueError as exc:  # several watched assets and no state_asset: a setup error
                raise ValueError(f"state_asset: {exc}; name the asset that keeps this trigger's position "
                                 f"(state_asset=...), got {self.state_asset!r}") from exc
            except Exception as exc:  # noqa: BLE001 - the API server may be restarting: wait for it
                failures += 1
                self.log.warning("Cannot read %s from the asset state store (%s); retrying", STATE_KEY, exc)
                await asyncio.sleep(self._backoff(failures))
        if stored is None:
            return None
        try:
            return normalize_partition(str(stored))
        except ValueError:
            self.log.warning("Ignoring %s=%r in the asset state store (not a partition); starting from %s",
                             STATE_KEY, stored, self.start)
            return None

    async def _save_last(self, store: Any, partition: str) -> bool:
        try:
            await store.aset(STATE_KEY, partition)
        except Exception as exc:  # noqa: BLE001 - kept and written again after the next check
            self.log.warning("Cannot record partition %s in the asset state store (%s); retrying later",
                             partition, exc)
            return False
        return True

    def _backoff(self, failures: int) -> float:
        return min(self.poll_interval * 2 ** min(failures, 4), max(MAX_BACKOFF, self.poll_interval))

    # --- the loop ---------------------------------------------------------------------

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = self._store()
        if store is None:
            self.log.warning("No asset state store (Airflow before 3.3, or not run as an asset watcher): a "
                             "restarted triggerer announces partitions again from %s", self.start)
            last = None
        else:
            last = await self._load_last(store)
        upcoming = self._upcoming(last)
        waiting_for = next(upcoming)
        self.log.info("Watching %s: last partition announced %s, next %s", self.path, last or "none", waiting_for)
        unsaved: str | None = None
        failures, announced = 0, ""
        while True:
            target = self._target(waiting_for)
            try:
                ready = await asyncio.to_thread(partition_ready, target)
                failures = 0
            except Exception as exc:  # noqa: BLE001 - a NameNode that does not answer: check again later
                failures += 1
                ready = False
                self.log.warning("Cannot check %s (%s); retrying", target.describe(), exc)
            if ready:
                self.log.info("Partition %s is complete: %s", waiting_for, target.describe())
                yield self._event(waiting_for)
                unsaved, waiting_for = waiting_for, next(upcoming)
                continue  # the next one may be complete too: each gets its own event, at once
            if unsaved is not None and store is not None:
                await asyncio.sleep(self.handover_seconds)
                if await self._save_last(store, unsaved):
                    unsaved = None
            if announced != waiting_for and not failures:
                self.log.info("Waiting for partition %s: %s", waiting_for, target.describe())
                announced = waiting_for
            await asyncio.sleep(self._backoff(failures))
