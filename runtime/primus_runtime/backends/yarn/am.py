"""The YARN backend's AM bootstrap, in the application's master container (started by skein):
the AM publishes its address to and mirrors its status into the job's HDFS directory, and puts
the outcome into YARN's application report.

With ``am.max_attempts > 1`` YARN starts a new application attempt when the AM's container dies.
skein's application master keeps no container across attempts, so every executor ended with the
attempt before; the new AM still carries the job on: it downloads the journal's copy each attempt
keeps in the job's HDFS directory (``am/journal_copy.py``) and takes over (the executors are found
gone and started again, uncharged and counted as restarts; the job keeps its events and duration), and
the input resumes from the work-preserve snapshots (the job's HDFS directory when the spec names none)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import ssl
import time
import urllib.error
from pathlib import Path
from urllib.parse import urlsplit

from ... import hadoop, protocol
from ...am import journal, journal_copy
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
    log_contents,
    parse_prelaunched,
)
from .executors import YarnExecutorBackend
from .kerberos import ENV_KEYTAB, ENV_PRINCIPAL, login_from, urlopen

log = logging.getLogger("primus.am")

# How often the AM copies a changed status to HDFS (where clients read it once the AM is gone).
STATUS_MIRROR_SECONDS = 2.0
# How often, at most, the AM journal's copy on HDFS is replaced (what a new attempt can miss:
# am/journal_copy.py): a WebHDFS create and rename each time (a new attempt counts every executor of the
# copy as gone, whatever state the copy has it in: YARN ended them all with the attempt before).
JOURNAL_UPLOAD_SECONDS = 1.0
# Where the input's work-preserve snapshots go, in the job's HDFS directory, for a job that may have
# several AM attempts and names no input.work_preserve_dir.
WORK_PRESERVE_NAME = "work-preserve"


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


class HdfsJournalCopy:
    """The AM journal's copy in the job's HDFS directory (an ``am.journal_copy.JournalCopy``)."""

    def __init__(self, store: HdfsJobStore, app_id: str):
        self.store, self.app_id = store, app_id
        self.name = store.path(app_id, journal.JOURNAL)

    async def download(self) -> str | None:
        data = await asyncio.to_thread(self.store.read, self.app_id, journal.JOURNAL)
        return None if data is None else data.decode()

    async def upload(self, text: str) -> bool:
        await asyncio.to_thread(self.store.write, self.app_id, journal.JOURNAL, text.encode())
        return True  # HDFS keeps any size


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
    status_path = Path("status.json").absolute()
    copy = HdfsJournalCopy(store, app_id) if spec.am_attempts > 1 else None
    recovered = None
    if copy is not None:
        spec = with_work_preserve_dir(spec, store, app_id)
        if attempt > 1:
            await asyncio.to_thread(note_attempt_before, rm, app_id, attempt)
            recovered = await journal_copy.download(copy, status_path.parent / journal.JOURNAL)
    am = ApplicationMaster(spec, app_id, backend, status_path=status_path, attempt=attempt, recovered=recovered)
    advertise = os.environ.get("NM_HOST") or socket.getfqdn()
    uploader = asyncio.ensure_future(journal_copy.keep_uploaded(am, copy, JOURNAL_UPLOAD_SECONDS)) \
        if copy is not None else None
    try:
        rc = await serve(am, Path(TOKEN_NAME).read_text().strip(), spec.am.host or "0.0.0.0", advertise,
                         AppStore(store, app_id), tls=_tls_context(advertise) if spec.am.tls else None)
    finally:
        if uploader is not None:
            uploader.cancel()
    # Put the outcome into YARN's report too (`yarn application -status`, the RM UI). skein's
    # master then stops this process: everything is saved by now.
    final = {JobState.SUCCEEDED: "SUCCEEDED", JobState.KILLED: "KILLED"}.get(am.record.state, "FAILED")
    try:
        await asyncio.to_thread(app.shutdown, final, f"{am.record.state.value}: {am.record.reason}"[:4000])
    except Exception:  # noqa: BLE001 - skein's master may already be going down
        log.exception("telling skein the final status failed")
    return rc


def with_work_preserve_dir(spec: JobSpec, store: HdfsJobStore, app_id: str) -> JobSpec:
    """The spec, its input's positions saved in the job's HDFS directory when it names no place: a new
    AM attempt resumes the input from there rather than from its start."""
    if spec.input is None or spec.input.work_preserve_dir is not None:
        return spec
    where = "hdfs://" + store.path(app_id, WORK_PRESERVE_NAME)
    log.info("input.work_preserve_dir: %s (the job's own, for its next AM attempts)", where)
    return spec.model_copy(update={"input": spec.input.model_copy(update={"work_preserve_dir": where})})


def note_attempt_before(rm: ResourceManager, app_id: str, attempt: int) -> None:
    """When the application attempt before this one ended and why, as YARN tells (the AM container's
    exit and diagnostics), for the master (``PRIMUS_AM_DOWN_SINCE`` / ``_CAUSE``)."""
    try:
        earlier = next((a for a in rm.app_attempts(app_id) if int(a.get("id", 0)) == attempt - 1), None)
    except (KeyError, ConnectionError, RuntimeError) as exc:
        log.info("the application attempt before this one is unknown: %s", exc)
        return
    if earlier is None:
        return
    if earlier.get("finishedTime"):
        os.environ[protocol.ENV_AM_DOWN_SINCE] = repr(earlier["finishedTime"] / 1000)
    cause = " ".join(str(earlier.get("diagnosticsInfo") or "").split())
    if not cause and earlier.get("nodeHttpAddress") and earlier.get("containerId"):
        # The RM keeps none for an attempt whose master exited on its own: skein's master said why in
        # its log ("Application driver failed with exit code 137"), which its NodeManager serves.
        cause = skein_shutdown_reason(earlier["nodeHttpAddress"], earlier["containerId"], rm)
    state = str(earlier.get("appAttemptState") or "ended").lower()
    os.environ[protocol.ENV_AM_DOWN_CAUSE] = f"AM attempt {attempt - 1} {state}" + (f": {cause}" if cause else "")


def skein_shutdown_reason(node_http: str, container_id: str, rm: ResourceManager) -> str:
    """What skein's application master logged as the reason it shut down ("" if unknown)."""
    url = f"http://{node_http}/ws/v1/node/containers/{container_id}/logs/application.master.log"
    url += "" if rm.login else f"?user.name={hadoop.hadoop_user()}"
    try:
        with urlopen(url, 5.0, rm.login) as response:
            text = log_contents(response.read()).decode(errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        log.info("the log of the attempt before (%s): %s", container_id, exc)
        return ""
    found = re.findall(r"Shutting down: (.+?)(?:, see logs for more information)?\.?$", text, re.MULTILINE)
    return found[-1].strip() if found else ""


def application_attempt(container_id: str) -> int:
    """The application attempt a container belongs to: container_[e<epoch>_]<ts>_<app>_<attempt>_<n>."""
    match = re.fullmatch(r"container_(?:e\d+_)?\d+_\d+_(\d+)_\d+", container_id)
    return int(match.group(1)) if match else 1


def _tls_context(advertise: str) -> ssl.SSLContext:
    """The API's TLS context for a job with ``am.tls``: a certificate for the advertised host from the
    job's CA, localized into this container only."""
    from ...tls import server_context_from_files  # cryptography: only for jobs that use it

    return server_context_from_files(Path(CA_CERT_NAME), Path(CA_KEY_NAME), advertise)
