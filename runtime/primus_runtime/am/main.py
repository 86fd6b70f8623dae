"""Run one job's AM: ``python -m primus_runtime.am --backend NAME [ARGS]``.

The backend's bootstrap (``backends/<name>/am.py``) reads the job, builds its executor backend
and its job store, then calls ``serve``: listen, publish the address, start the job, serve the
API until the job ends, save the outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import functools
import gc
import json
import logging
import signal
import ssl
import sys
import threading
import time
from collections.abc import Callable

from .. import backends
from ..backends.base import JobStore
from . import early
from .master import ApplicationMaster
from .state import JobState

log = logging.getLogger("primus.am")

# The AM's exit codes: 0 the job succeeded, 1 it did not, 2 it cannot run on this backend (verdicts,
# never retried), EXIT_CRASHED an uncaught error (the AM is restarted while am.max_attempts allows).
EXIT_CRASHED = 70

# After the job ends the API stays up this long, so watchers see the outcome live; longer (at most
# PAGE_LINGER_SECONDS in all) while a browser showing the live page has not read the outcome yet.
LINGER_SECONDS = 1.0
PAGE_LINGER_SECONDS = 8.0
# How long the AM tries to save the job's outcome through an outage of its store (``_save_outcome``).
OUTCOME_SAVE_SECONDS = 120.0


async def serve(am: ApplicationMaster, token: str, host: str, advertise: str | None, store: JobStore,
                port: int | None = None, tls: ssl.SSLContext | None = None,
                on_signal: Callable[[int], None] | None = None) -> int:
    """Run the AM's API until the job ends. ``store`` learns the API's address, and gets the status
    while the job runs (when it asks for copies) and the moment the outcome is known, not after
    lingering. ``tls``: serve HTTPS with this context (its certificate names ``advertise or host``).
    ``on_signal``: what SIGTERM and SIGINT do instead of stopping the job (a backend that runs
    another AM attempt after this one)."""
    spec = am.spec
    # Listen before launching anything: executors that connect while the API is still
    # being set up wait in the socket's backlog instead of failing.
    # (or before importing it: am/early.py).
    port = spec.am.port if port is None else port
    try:
        sock = early.socket_for(host, port)
    except OSError as exc:
        return await _cannot_listen(am, store, host, port, exc)
    # am.advertise: something in front of the AM (NAT, proxy) that executors and clients must use.
    address = spec.am.advertise or f"{advertise or host}:{sock.getsockname()[1]}"
    store.publish_address(address)
    log.info("job %s (%s): AM API at %s://%s/api/v1", am.record.app_id, spec.name, "https" if tls else "http",
             address)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal or functools.partial(_on_signal, am), sig)
    # Executors boot (a Python start each) while this process imports the HTTP stack.
    await am.start(address)
    import_http_stack()
    from aiohttp import web  # imported only now, on purpose (see above)

    from .server import PAGE_READERS, build_app

    app = build_app(am, token)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=early.BACKLOG, ssl_context=tls).start()
    if not gc.isenabled():  # off for the start-up (am/__main__.py): what it made stays, unscanned
        gc.freeze()
        gc.enable()
    tune_collector()
    mirror = asyncio.ensure_future(_mirror_status(am, store)) if store.mirror_interval else None
    try:
        await am.done.wait()
        if mirror is not None:
            mirror.cancel()
        await _save_outcome(am, store)
        await app[PAGE_READERS].until_read(LINGER_SECONDS, PAGE_LINGER_SECONDS)
    finally:
        await am.close()
        await runner.cleanup()
    state = am.record.state
    log.info("job %s finished: %s (%s)", am.record.app_id, state.value, am.record.reason)
    return 0 if state is JobState.SUCCEEDED else 1


async def _save_outcome(am: ApplicationMaster, store: JobStore, within: float | None = None) -> None:
    """The final status and the history, where the store's clients read them once the AM is gone.

    The final status is tried again through an outage of the store (HDFS restarting) for up to
    ``within`` seconds (``OUTCOME_SAVE_SECONDS``): without it a job that ended says ``lost`` for
    ever. The API keeps serving the outcome meanwhile."""
    within = OUTCOME_SAVE_SECONDS if within is None else within
    started, pause = time.monotonic(), 1.0
    while True:
        try:
            await asyncio.to_thread(_save_status, am, store, True)
            if pause > 1.0:
                log.warning("the outcome is saved, %.1f s after the first try", time.monotonic() - started)
            break
        except Exception as exc:  # noqa: BLE001 - e.g. HDFS unavailable
            waited = time.monotonic() - started
            if waited + pause > within:
                log.exception("saving the outcome failed for %.0f s: clients read the cluster's outcome only", waited)
                break
            if pause == 1.0:
                log.warning("saving the outcome failed (%s): trying again for up to %.0f s", exc, within)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)
    try:
        await asyncio.to_thread(_save_history, am, store)
    except Exception:  # noqa: BLE001 - the history page then lacks the task table, nothing else
        log.exception("saving the job's history failed")


# What a setting of the spec can do about an error binding the API's socket.
_LISTEN_SETTING = {errno.EADDRINUSE: "am.port", errno.EACCES: "am.port", errno.EADDRNOTAVAIL: "am.host"}


async def _cannot_listen(am: ApplicationMaster, store: JobStore, host: str, port: int, exc: OSError) -> int:
    """The API cannot listen (``am.port`` busy, ``am.host`` not this machine's): nothing of the job ran.
    The first attempt records it as the job's outcome, which names the cause (an uncaught error left
    it ``lost`` with the cause at the end of a traceback): every attempt would meet it. A later attempt
    may have executors to take over, and its journal is not read yet: it only ends, for the next."""
    setting = _LISTEN_SETTING.get(exc.errno or 0)
    reason = (f"the AM cannot listen on port {port} of {host}: {(exc.strerror or str(exc)).lower()}"
              + (f" ({setting})" if setting else ""))
    if am.record.attempt > 1:
        log.error("%s: AM attempt %d ends; the next one, if am.max_attempts allows, tries again", reason,
                  am.record.attempt)
        return EXIT_CRASHED
    return await fail_unstarted(am, store, reason)


async def fail_unstarted(am: ApplicationMaster, store: JobStore, reason: str) -> int:
    """Record the job failed for ``reason`` before this AM ran any of it (it cannot serve, or its
    backend's attempts are used up), save that where clients read it, and end (exit status 1)."""
    log.error("job %s failed: %s", am.record.app_id, reason)
    am.cannot_start(reason)
    try:
        await _save_outcome(am, store)
    finally:
        await am.close()
    return 1


def import_http_stack() -> None:
    """Import aiohttp, leaving the CA certificates of its default client TLS contexts to a thread.

    Importing aiohttp makes two client TLS contexts and loads the system's CA certificates into each
    (~20 ms apiece: a tenth of the AM's way to its first executor). The AM serves; nothing in it is an
    aiohttp client, let alone in its first milliseconds. So during the import the loading is only
    noted, and a thread then does it on the same contexts (OpenSSL releases the GIL meanwhile): after
    that they are what aiohttp made them to be."""
    if "aiohttp" in sys.modules:
        return
    noted: list[ssl.SSLContext] = []

    def note(context: ssl.SSLContext) -> None:
        noted.append(context)

    load = ssl.SSLContext.set_default_verify_paths
    ssl.SSLContext.set_default_verify_paths = note  # type: ignore[method-assign,assignment]
    try:
        import aiohttp.web  # noqa: F401
    finally:
        del ssl.SSLContext.set_default_verify_paths  # the inherited method again
    if noted:
        threading.Thread(target=lambda: [load(context) for context in noted], name="aiohttp-ca-certificates",
                         daemon=True).start()


def _on_signal(am: ApplicationMaster, sig: int) -> None:
    if am.record.finishing is None and not am.record.state.terminal:
        am.finish(JobState.KILLED, f"AM received {signal.Signals(sig).name}")


async def _mirror_status(am: ApplicationMaster, store: JobStore) -> None:
    """Copy the status file to the store when it changed, so clients see it when this AM is gone."""
    written = 0.0
    while True:
        await asyncio.sleep(store.mirror_interval or 1.0)
        path = am.status_path
        if path is not None and path.exists() and path.stat().st_mtime != written:
            written = path.stat().st_mtime
            try:
                await asyncio.to_thread(_save_status, am, store, False)
            except Exception:  # noqa: BLE001 - the store may be briefly unavailable; the next round retries
                log.exception("saving the status to the job store failed")


_saving = threading.Lock()


def _save_status(am: ApplicationMaster, store: JobStore, final: bool) -> None:
    # One save at a time, each reading the file when it starts: a periodic save still under
    # way when the job ends cannot put an older status over the final one.
    with _saving:
        if am.status_path is not None and am.status_path.exists():
            store.save_status(am.status_path.read_bytes(), final)


def _save_history(am: ApplicationMaster, store: JobStore) -> None:
    """What the history page shows besides the status and the event log: the task and partition
    tables, written beside the status file; a store whose clients cannot read that directory gets
    copies of all three."""
    if am.status_path is None:
        return
    from ..ui.views import PARTITIONS, TASK_TABLE, LiveView, task_table
    from .timeline import EVENT_LOG

    directory = am.status_path.parent
    view = LiveView(am)
    table = task_table(view)
    if table is not None:
        (directory / TASK_TABLE).write_bytes(table)
        (directory / PARTITIONS).write_text(json.dumps(view.partitions()))
    store.save_history({name: directory / name for name in (EVENT_LOG, TASK_TABLE, PARTITIONS)
                        if (directory / name).exists()})


# The cyclic collector's thresholds in the AM (CPython's are 700, 10, 10). A full collection walks every
# object that is not frozen, and an AM's heap is mostly objects that live seconds: aiohttp keeps each
# keep-alive connection's last request and response (~70 objects) until its next request, so with
# 10,000 executors ~700,000 objects, replaced every heartbeat interval, all promoted to the oldest
# generation. With CPython's thresholds a full collection (0.4 s, finding nothing: these die by
# reference count) ran every ~2 s and held every heartbeat behind it (p99 0.37-0.49 s in bench/scale.py);
# with these, young collections come every 50,000 allocations, full ones ~100x more rarely
# (none in a 60 s steady state at 10,000 executors: p99 12-20 ms). Cyclic garbage still goes.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_collector() -> None:
    """The AM process's collector thresholds (GC_THRESHOLDS): set once the server is up."""
    gc.set_threshold(*GC_THRESHOLDS)


def _use_fast_loop() -> None:
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m primus_runtime.am")
    parser.add_argument("--backend", required=True, choices=backends.NAMES, help="the backend the job runs on")
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _use_fast_loop()
    try:
        code = asyncio.run(backends.get(args.backend).run_am(rest))
    except Exception:  # noqa: BLE001 - a bug, not a verdict: exit so that the AM is restarted (am.max_attempts)
        log.exception("the AM crashed")
        code = EXIT_CRASHED
    sys.exit(code)
