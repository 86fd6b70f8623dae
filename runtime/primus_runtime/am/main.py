"""Run one job's AM: load the job dir, serve the API, run until the job ends."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..backends.local import LOCAL_HOST, JobDir, LocalExecutorBackend
from ..hadoop import ENV_WEBHDFS, hdfs_filesystem
from ..spec import JobSpec, LocalBackend
from .master import ApplicationMaster
from .state import JobState

log = logging.getLogger("primus.am")

# After the job ends the API stays up this long, so watchers see the outcome live.
LINGER_SECONDS = 1.0
# How often a YARN AM copies a changed status to HDFS (where clients read it once the AM is gone).
STATUS_MIRROR_SECONDS = 2.0


async def run(job: JobDir, bundle: Path) -> int:
    """The local backend's AM: the job's files are in ``job``, executors are local processes."""
    spec = JobSpec.model_validate_json(job.spec.read_text())
    if not isinstance(spec.backend, LocalBackend):
        log.error("backend %r is not available in this AM yet", spec.backend.type)
        return 2
    backend = LocalExecutorBackend(job, spec.backend, bundle)
    am = ApplicationMaster(spec, job.app_id, backend, status_path=job.status)

    def publish(address: str) -> None:
        _write_json(job.am_info, {"address": address, "pid": os.getpid(), "started_at": time.time()})

    return await serve(am, job.token.read_text().strip(), spec.am.host or LOCAL_HOST, None, publish)


async def run_yarn() -> int:
    """The YARN backend's AM, in the application's master container (started by skein)."""
    import skein

    from ..backends import yarn

    spec = JobSpec.model_validate_json(Path(yarn.SPEC_NAME).read_text())
    app_id = skein.properties.application_id
    app = skein.ApplicationClient.from_current()
    rm = yarn.ResourceManager(os.environ[yarn.ENV_RM_WEB])
    store = yarn.JobStore(hdfs_filesystem("webhdfs://" + urlsplit(os.environ[ENV_WEBHDFS]).netloc),
                          os.environ[yarn.ENV_JOB_STORE])
    backend = yarn.YarnExecutorBackend(app, rm, prelaunched=yarn.parse_prelaunched(os.environ.get(yarn.ENV_PRELAUNCHED, "")))
    am = ApplicationMaster(spec, app_id, backend, status_path=Path("status.json").absolute())

    def publish(address: str) -> None:
        store.write(app_id, "am.json", json.dumps({"address": address, "started_at": time.time(),
                                                   "container": os.environ.get("CONTAINER_ID")}).encode())

    mirror = asyncio.ensure_future(_mirror_status(am, store, app_id))
    advertise = os.environ.get("NM_HOST") or socket.getfqdn()
    rc = await serve(am, Path(yarn.TOKEN_NAME).read_text().strip(), spec.am.host or "0.0.0.0", advertise, publish,
                     on_done=lambda: asyncio.to_thread(_upload_status, am, store, app_id))
    mirror.cancel()
    # Put the outcome into YARN's report too (`yarn application -status`, the RM UI). skein's
    # master then stops this process: everything is saved by now.
    final = {JobState.SUCCEEDED: "SUCCEEDED", JobState.KILLED: "KILLED"}.get(am.record.state, "FAILED")
    try:
        await asyncio.to_thread(app.shutdown, final, f"{am.record.state.value}: {am.record.reason}"[:4000])
    except Exception:  # noqa: BLE001 - skein's master may already be going down
        log.exception("telling skein the final status failed")
    return rc


async def _mirror_status(am: ApplicationMaster, store: Any, app_id: str) -> None:
    """Copy the status file to HDFS when it changed, so clients see it when this AM is gone."""
    written = 0.0
    while True:
        await asyncio.sleep(STATUS_MIRROR_SECONDS)
        path = am.status_path
        if path is not None and path.exists() and path.stat().st_mtime != written:
            written = path.stat().st_mtime
            try:
                await asyncio.to_thread(_upload_status, am, store, app_id)
            except Exception:  # noqa: BLE001 - HDFS may be briefly unavailable; next round retries
                log.exception("mirroring the status to HDFS failed")


_uploading = threading.Lock()


def _upload_status(am: ApplicationMaster, store: Any, app_id: str) -> None:
    # One upload at a time, each reading the file when it starts: a periodic upload still under
    # way when the job ends cannot put an older status over the final one.
    with _uploading:
        if am.status_path is not None and am.status_path.exists():
            store.write(app_id, "status.json", am.status_path.read_bytes())


async def serve(am: ApplicationMaster, token: str, host: str, advertise: str | None,
                publish: Callable[[str], None], on_done: Callable[[], Awaitable[None]] | None = None) -> int:
    """Run the AM's API until the job ends; ``publish`` tells clients the API's address, ``on_done``
    runs the moment the outcome is known (a YARN AM saves it to HDFS then, not after lingering)."""
    spec = am.spec
    # Listen before launching anything: executors that connect while the API is still
    # being set up wait in the socket's backlog instead of failing.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, spec.am.port))
    sock.listen(2048)
    address = f"{advertise or host}:{sock.getsockname()[1]}"
    publish(address)
    log.info("job %s (%s): AM API at http://%s/api/v1", am.record.app_id, spec.name, address)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, am, sig)
    # Executors boot (a Python start each) while this process imports the HTTP stack.
    await am.start(address)
    from aiohttp import web  # imported only now, on purpose (see above)

    from .server import build_app

    runner = web.AppRunner(build_app(am, token), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=2048).start()
    try:
        await am.done.wait()
        if on_done is not None:
            try:
                await on_done()
            except Exception:  # noqa: BLE001 - e.g. HDFS unavailable: clients still get YARN's outcome
                log.exception("saving the outcome failed")
        await asyncio.sleep(LINGER_SECONDS)
    finally:
        await am.close()
        await runner.cleanup()
    state = am.record.state
    log.info("job %s finished: %s (%s)", am.record.app_id, state.value, am.record.reason)
    return 0 if state is JobState.SUCCEEDED else 1


def _on_signal(am: ApplicationMaster, sig: int) -> None:
    if am.record.finishing is None and not am.record.state.terminal:
        am.finish(JobState.KILLED, f"AM received {signal.Signals(sig).name}")


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _use_fast_loop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m primus_runtime.am")
    parser.add_argument("job_dir", type=Path, nargs="?", help="the local job's directory")
    parser.add_argument("--bundle", type=Path, help="the runtime bundle executors run (local backend)")
    parser.add_argument("--yarn", action="store_true", help="run inside a YARN application's master container")
    args = parser.parse_args(argv)
    if not args.yarn and (args.job_dir is None or args.bundle is None):
        parser.error("job_dir and --bundle are required unless --yarn")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _use_fast_loop()
    if args.yarn:
        sys.exit(asyncio.run(run_yarn()))
    sys.exit(asyncio.run(run(JobDir(args.job_dir.resolve()), args.bundle)))
