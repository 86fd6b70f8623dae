"""The YARN backend's AM bootstrap, in the application's master container (started by skein):
the AM publishes its address to and mirrors its status into the job's HDFS directory, and puts
the outcome into YARN's application report."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import ssl
import time
from pathlib import Path
from urllib.parse import urlsplit

from ... import hadoop
from ...am.main import serve
from ...am.master import ApplicationMaster
from ...hadoop import ENV_WEBHDFS, hdfs_filesystem
from ...spec import JobSpec
from ...states import JobState
from ..base import JobStore
from .cluster import (
    CA_CERT_NAME,
    CA_KEY_NAME,
    ENV_JOB_STORE,
    ENV_PRELAUNCHED,
    ENV_RM_WEB,
    SPEC_NAME,
    TOKEN_NAME,
    HdfsJobStore,
    ResourceManager,
    parse_prelaunched,
)
from .executors import YarnExecutorBackend
from .kerberos import ENV_KEYTAB, ENV_PRINCIPAL, login_from

log = logging.getLogger("primus.am")

# How often the AM copies a changed status to HDFS (where clients read it once the AM is gone).
STATUS_MIRROR_SECONDS = 2.0


class AppStore(JobStore):
    """One application's files in the HDFS job store."""

    mirror_interval = STATUS_MIRROR_SECONDS

    def __init__(self, store: HdfsJobStore, app_id: str):
        self.store = store
        self.app_id = app_id

    def publish_address(self, address: str) -> None:
        self.store.write(self.app_id, "am.json", json.dumps({
            "address": address, "started_at": time.time(), "container": os.environ.get("CONTAINER_ID")}).encode())

    def save_status(self, document: bytes, final: bool) -> None:
        self.store.write(self.app_id, "status.json", document)

    def save_history(self, files: dict[str, Path]) -> None:
        for name, path in files.items():
            self.store.write(self.app_id, name, path.read_bytes())


async def run_am(args: list[str]) -> int:
    import skein

    spec = JobSpec.model_validate_json(Path(SPEC_NAME).read_text())
    app_id = skein.properties.application_id
    app = skein.ApplicationClient.from_current()
    # A Kerberized cluster: the submitter's keytab, localized in this container only.
    login = login_from(os.environ.get(ENV_PRINCIPAL), os.environ.get(ENV_KEYTAB), (ENV_PRINCIPAL, ENV_KEYTAB))
    hadoop.use_login(login)  # the data plane's WebHDFS (input listing, data checkpoints) too
    rm = ResourceManager(os.environ[ENV_RM_WEB], login=login)
    store = HdfsJobStore(hdfs_filesystem("webhdfs://" + urlsplit(os.environ[ENV_WEBHDFS]).netloc, login=login),
                         os.environ[ENV_JOB_STORE])
    backend = YarnExecutorBackend(app, rm, prelaunched=parse_prelaunched(os.environ.get(ENV_PRELAUNCHED, "")),
                                  webhdfs=os.environ[ENV_WEBHDFS])
    attempt = application_attempt(os.environ.get("CONTAINER_ID", ""))
    am = ApplicationMaster(spec, app_id, backend, status_path=Path("status.json").absolute(), attempt=attempt)
    advertise = os.environ.get("NM_HOST") or socket.getfqdn()
    rc = await serve(am, Path(TOKEN_NAME).read_text().strip(), spec.am.host or "0.0.0.0", advertise,
                     AppStore(store, app_id), tls=_tls_context(advertise) if spec.am.tls else None)
    # Put the outcome into YARN's report too (`yarn application -status`, the RM UI). skein's
    # master then stops this process: everything is saved by now.
    final = {JobState.SUCCEEDED: "SUCCEEDED", JobState.KILLED: "KILLED"}.get(am.record.state, "FAILED")
    try:
        await asyncio.to_thread(app.shutdown, final, f"{am.record.state.value}: {am.record.reason}"[:4000])
    except Exception:  # noqa: BLE001 - skein's master may already be going down
        log.exception("telling skein the final status failed")
    return rc


def application_attempt(container_id: str) -> int:
    """The application attempt a container belongs to: container_[e<epoch>_]<ts>_<app>_<attempt>_<n>."""
    match = re.fullmatch(r"container_(?:e\d+_)?\d+_\d+_(\d+)_\d+", container_id)
    return int(match.group(1)) if match else 1


def _tls_context(advertise: str) -> ssl.SSLContext:
    """The API's TLS context for a job with ``am.tls``: a certificate for the advertised host from the
    job's CA, localized into this container only."""
    from ...tls import server_context_from_files  # cryptography: only for jobs that use it

    return server_context_from_files(Path(CA_CERT_NAME), Path(CA_KEY_NAME), advertise)
