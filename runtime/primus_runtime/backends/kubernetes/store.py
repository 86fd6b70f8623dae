"""The AM's job store on Kubernetes: the ``<app>-store`` ConfigMap (``am.json``, ``status.json``),
read by the client (``client.py``); and for a job with ``am.max_attempts > 1`` the AM journal's
copy in the ``<app>-journal`` ConfigMap, which the next AM attempt starts from."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..base import JobStore
from .api import KubeApi, config_maps_path
from .client import STORE_ADDRESS_KEY, STORE_STATUS_KEY
from .manifests import JOURNAL_KEY

log = logging.getLogger("primus.am")

# A ConfigMap holds at most 1 MiB in all; the status keeps clear of it (am.json is small).
MAX_STATUS_BYTES = 900 * 1024
MAX_JOURNAL_BYTES = 900 * 1024
STATUS_MIRROR_SECONDS = 2.0


def fit_status(document: bytes, limit: int = MAX_STATUS_BYTES) -> bytes:
    """``document`` (the status JSON) within ``limit`` bytes: the oldest events go first, and
    ``events_dropped`` says how many went."""
    if len(document) <= limit:
        return document
    status: dict[str, Any] = json.loads(document)
    events = status.get("events", [])
    dropped = 0
    while True:
        dropped = min(len(events), dropped + max(1, (len(events) - dropped) // 4))  # a few rounds at most
        status["events"] = events[dropped:]
        status["events_dropped"] = dropped
        text = json.dumps(status, indent=1).encode()
        if len(text) <= limit or dropped >= len(events):
            return text


T = TypeVar("T")
# How long a call from another thread waits for the loop's answer (the client's own timeouts come first).
BRIDGE_TIMEOUT = 120.0


class _ConfigMap:
    """One ConfigMap of the job, through the AM's ``KubeApi``."""

    def __init__(self, api: KubeApi, namespace: str, name: str):
        self.api = api
        self.namespace = namespace
        self.name = name

    async def read_data(self) -> dict[str, str]:
        return dict((await self.api.get(config_maps_path(self.namespace, self.name))).get("data") or {})

    async def patch_data(self, data: dict[str, str]) -> None:
        await self.api.merge_patch(config_maps_path(self.namespace, self.name), {"data": data})


class ConfigMapStore(_ConfigMap, JobStore):
    """``JobStore``'s calls are synchronous, the API client lives on the AM's loop (``loop``): from
    a worker thread (``asyncio.to_thread``) a call waits for the loop's answer; from the loop itself
    it cannot wait, so it goes on as a task whose failure is logged."""

    mirror_interval = STATUS_MIRROR_SECONDS

    def __init__(self, api: KubeApi, namespace: str, name: str, loop: asyncio.AbstractEventLoop, attempt: int = 1):
        super().__init__(api, namespace, name)
        self.loop = loop
        self.attempt = attempt
        self.deaths: list[float] = []  # when each earlier AM attempt died (am.attempt_failures_validity_interval)
        self._warned = False
        self._tasks: set[asyncio.Future[Any]] = set()

    def publish_address(self, address: str) -> None:
        self._patch(STORE_ADDRESS_KEY, json.dumps({"address": address, "pod": os.environ.get("POD_NAME"),
                                                   "started_at": time.time(), "attempt": self.attempt,
                                                   "deaths": self.deaths}),
                    "publishing the AM's address")

    async def published(self) -> dict[str, Any] | None:
        """What the AM attempt before this one published (``am.json``), if one did."""
        data = await self.read_data()
        return json.loads(data[STORE_ADDRESS_KEY]) if data.get(STORE_ADDRESS_KEY) else None

    def save_status(self, document: bytes, final: bool) -> None:
        fitted = fit_status(document)
        if len(fitted) < len(document) and not self._warned:
            self._warned = True
            log.warning("the status (%d bytes) is more than a ConfigMap keeps: its oldest events are left out "
                        "of the saved copy (the AM's API still serves them)", len(document))
        self._patch(STORE_STATUS_KEY, fitted.decode(), "saving the status")

    def _patch(self, key: str, text: str, what: str) -> None:
        call = self.patch_data({key: text})
        if self._on_loop():
            task = asyncio.ensure_future(_logged(call, what))  # serve() publishes from the loop
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._wait(call)

    def _wait(self, call: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(call, self.loop).result(BRIDGE_TIMEOUT)

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False


async def _logged(call: Coroutine[Any, Any, None], what: str) -> None:
    try:
        await call
    except Exception:  # noqa: BLE001 - nobody waits for it: said in the log
        log.exception("%s failed", what)


class JournalConfigMap(_ConfigMap):
    """The AM journal's copy (compacted: one line per object) in the ``<app>-journal`` ConfigMap
    (an ``am.journal_copy.JournalCopy``)."""

    async def download(self) -> str | None:
        """The journal an earlier attempt uploaded: None when none did, "" when it outgrew the
        ConfigMap (that job cannot be taken over)."""
        return (await self.read_data()).get(JOURNAL_KEY)

    async def upload(self, text: str) -> bool:
        """Replace the copy with ``text``; False (and the copy emptied, so no later attempt takes
        over from an outdated one) when it is more than a ConfigMap keeps."""
        fits = len(text.encode()) <= MAX_JOURNAL_BYTES
        await self.patch_data({JOURNAL_KEY: text if fits else ""})
        return fits
