"""The local backend's AM bootstrap: the job's files are in its job directory, executors are
local processes, and clients read the address and status files there."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

from ... import procfs, protocol
from ...am import journal
from ...am.main import serve
from ...am.master import ApplicationMaster
from ...spec import JobSpec
from ..base import JobStore
from .executors import LocalExecutorBackend
from .jobs import LOCAL_HOST, JobDir
from .settings import LocalBackend

log = logging.getLogger("primus.am")

# How often a supervised AM checks that its supervisor still lives (and starts a new one if not).
SUPERVISOR_CHECK_SECONDS = 1.0


class JobDirStore(JobStore):
    """Clients read the AM's address from ``am.json`` and its status from ``status.json``, which
    the AM itself writes: nothing to copy."""

    def __init__(self, job: JobDir):
        self.job = job

    def publish_address(self, address: str) -> None:
        tmp = self.job.am_info.with_suffix(".tmp")
        tmp.write_text(json.dumps({"address": address, "pid": os.getpid(), "started_at": time.time()}))
        os.replace(tmp, self.job.am_info)


async def run_am(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m primus_runtime.am --backend local")
    parser.add_argument("job_dir", type=Path, help="the local job's directory")
    parser.add_argument("--bundle", type=Path, required=True, help="the runtime bundle executors run")
    parsed = parser.parse_args(args)
    job = JobDir(parsed.job_dir.resolve())
    spec = JobSpec.model_validate_json(job.spec.read_text())
    if not isinstance(spec.backend, LocalBackend):
        log.error("a %r job cannot run on the local backend", spec.backend.type)
        return 2
    backend = LocalExecutorBackend(job, spec.backend, parsed.bundle)
    attempt = int(os.environ.get(protocol.ENV_AM_ATTEMPT, "1"))
    # A restarted AM (the supervisor's next attempt) carries on from its predecessor's journal.
    recovered = journal.load(job.path / journal.JOURNAL) if attempt > 1 else None
    am = ApplicationMaster(spec, job.app_id, backend, status_path=job.status, attempt=attempt, recovered=recovered)
    host = spec.am.host or LOCAL_HOST
    supervision = asyncio.ensure_future(keep_supervised(am, job, parsed.bundle)) if spec.am_attempts > 1 else None
    try:
        return await serve(am, job.token.read_text().strip(), host, None, JobDirStore(job),
                           tls=_tls_context(job, host) if spec.am.tls else None)
    finally:
        if supervision is not None:
            supervision.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await supervision


async def keep_supervised(am: ApplicationMaster, job: JobDir, bundle: Path) -> None:
    """A dead supervisor would leave the next AM death with nobody to start another attempt: this AM
    starts a new supervisor, which watches it (``supervisor.py --watch``) and becomes ``am.pid``."""
    while not am.record.state.terminal:
        await asyncio.sleep(SUPERVISOR_CHECK_SECONDS)
        try:
            supervisor = int(job.am_pid.read_text())
        except (OSError, ValueError):
            supervisor = None
        if supervisor is None or procfs.alive(supervisor) or am.record.state.terminal:
            continue
        with open(job.am_log, "ab") as out:
            watcher = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("supervisor.py")), str(job.path), "--bundle", str(bundle),
                 "--max-attempts", str(am.spec.am_attempts), "--watch", str(os.getpid()),
                 "--attempt", str(am.record.attempt),
                 *(["--window", repr(window)] if (window := am.spec.am.attempt_failures_validity_interval) else [])],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        job.am_pid.write_text(str(watcher.pid))
        reason = (f"the AM's supervisor (pid {supervisor}) died: a new one (pid {watcher.pid}) watches this AM "
                  f"and starts the next attempt if it dies")
        log.warning("%s", reason)
        am.record.add_event("job", am.record.state.value, am.record.state.value, reason)


def _tls_context(job: JobDir, host: str) -> ssl.SSLContext:
    """The API's TLS context for a job with ``am.tls``: a certificate for ``host`` from the CA submit made."""
    from ...tls import server_context_from_files  # cryptography: only for jobs that use it

    return server_context_from_files(job.ca_cert, job.ca_key, host)
