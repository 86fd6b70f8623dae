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
import time
from pathlib import Path

from ..backends.local import LOCAL_HOST, JobDir, LocalExecutorBackend
from ..spec import JobSpec, LocalBackend
from .master import ApplicationMaster
from .state import JobState

log = logging.getLogger("primus.am")

# After the job ends the API stays up this long, so watchers see the outcome live.
LINGER_SECONDS = 1.0


async def run(job: JobDir, bundle: Path) -> int:
    spec = JobSpec.model_validate_json(job.spec.read_text())
    token = job.token.read_text().strip()
    if not isinstance(spec.backend, LocalBackend):
        log.error("backend %r is not available in this AM yet", spec.backend.type)
        return 2
    backend = LocalExecutorBackend(job, spec.backend, bundle)
    am = ApplicationMaster(spec, job.app_id, backend, status_path=job.status)

    # Listen before launching anything: executors that connect while the API is still
    # being set up wait in the socket's backlog instead of failing.
    host = spec.am.host or LOCAL_HOST
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, spec.am.port))
    sock.listen(2048)
    address = f"{host}:{sock.getsockname()[1]}"
    _write_json(job.am_info, {"address": address, "pid": os.getpid(), "started_at": time.time()})
    log.info("job %s (%s): AM API at http://%s/api/v1", job.app_id, spec.name, address)

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
        await asyncio.sleep(LINGER_SECONDS)
    finally:
        await am.close()
        await runner.cleanup()
    state = am.record.state
    log.info("job %s finished: %s (%s)", job.app_id, state.value, am.record.reason)
    return 0 if state.value == "succeeded" else 1


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
    parser.add_argument("job_dir", type=Path)
    parser.add_argument("--bundle", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _use_fast_loop()
    sys.exit(asyncio.run(run(JobDir(args.job_dir.resolve()), args.bundle)))
