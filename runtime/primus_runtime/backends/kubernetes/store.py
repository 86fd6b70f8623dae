"""The AM's job store on Kubernetes: the ``<app>-store`` ConfigMap (``am.json``, ``status.json``),
read by the client (``client.py``); and for a job with ``am.max_attempts > 1`` the AM journal's
copy in the ``<app>-journal`` ConfigMap, which the next AM attempt starts from."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from ..base import JobStore
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


class ConfigMapStore(JobStore):
    mirror_interval = STATUS_MIRROR_SECONDS

    def __init__(self, core: Any, namespace: str, name: str, attempt: int = 1):
        self.core = core  # kubernetes.client.CoreV1Api
        self.namespace = namespace
        self.name = name
        self.attempt = attempt
        self._warned = False

    def _patch(self, key: str, text: str) -> None:
        self.core.patch_namespaced_config_map(self.name, self.namespace, {"data": {key: text}})

    def publish_address(self, address: str) -> None:
        self._patch(STORE_ADDRESS_KEY, json.dumps({"address": address, "pod": os.environ.get("POD_NAME"),
                                                   "started_at": time.time(), "attempt": self.attempt}))

    def published(self) -> dict[str, Any] | None:
        """What the AM attempt before this one published (``am.json``), if one did."""
        data = self.core.read_namespaced_config_map(self.name, self.namespace).data or {}
        return json.loads(data[STORE_ADDRESS_KEY]) if data.get(STORE_ADDRESS_KEY) else None

    def save_status(self, document: bytes, final: bool) -> None:
        fitted = fit_status(document)
        if len(fitted) < len(document) and not self._warned:
            self._warned = True
            log.warning("the status (%d bytes) is more than a ConfigMap keeps: its oldest events are left out "
                        "of the saved copy (the AM's API still serves them)", len(document))
        self._patch(STORE_STATUS_KEY, fitted.decode())


class JournalConfigMap:
    """The AM journal's copy (compacted: one line per object) in the ``<app>-journal`` ConfigMap."""

    def __init__(self, core: Any, namespace: str, name: str):
        self.core = core  # kubernetes.client.CoreV1Api
        self.namespace = namespace
        self.name = name

    def download(self) -> str | None:
        """The journal an earlier attempt uploaded: None when none did, "" when it outgrew the
        ConfigMap (that job cannot be taken over)."""
        return (self.core.read_namespaced_config_map(self.name, self.namespace).data or {}).get(JOURNAL_KEY)

    def upload(self, text: str) -> bool:
        """Replace the copy with ``text``; False (and the copy emptied, so no later attempt takes
        over from an outdated one) when it is more than a ConfigMap keeps."""
        fits = len(text.encode()) <= MAX_JOURNAL_BYTES
        self.core.patch_namespaced_config_map(self.name, self.namespace, {"data": {JOURNAL_KEY: text if fits else ""}})
        return fits
