"""The history server: a finished job's page, served from what its AM left (``primus ui APP``).

It reads the job through its backend's ``ClusterClient``: the final (or last) status document,
the event log (events and the timeline's samples), the task and partition tables, the spec, and the
executors' logs on demand. It serves the same routes and the same page as the AM, read-only. It
runs on the user's machine under a secret of its own (the job's token may be gone with the job):
the one-time sign-in link it prints is the way in.
"""

from __future__ import annotations

import json
import secrets
from typing import TYPE_CHECKING

from aiohttp import web

from ..am.timeline import EVENT_LOG, read_event_log
from .auth import WebAuth, make_ticket
from .views import PARTITIONS, TASK_TABLE, ArchiveView
from .web import Guard, add_page_routes, add_read_routes, json_error_app

if TYPE_CHECKING:
    from ..client import PrimusClient


class NoHistory(Exception):
    """The job left nothing to show."""


def archive_view(client: PrimusClient, app_id: str) -> ArchiveView:
    cluster = client.cluster_for(app_id)
    status = cluster.final_status(app_id) or cluster.last_status(app_id)
    if status is None:
        raise NoHistory(f"job {app_id} left no status: its AM never saved one")
    log = cluster.history_file(app_id, EVENT_LOG)
    events, samples = read_event_log(log.decode()) if log else ([], [])
    partitions = cluster.history_file(app_id, PARTITIONS)
    return ArchiveView(status, cluster.spec(app_id).model_dump(mode="json"), events, samples,
                       cluster.history_file(app_id, TASK_TABLE), json.loads(partitions) if partitions else None,
                       lambda path, offset: cluster.read_log(app_id, path, offset))


def history_app(view: ArchiveView) -> tuple[web.Application, WebAuth]:
    auth = WebAuth(secrets.token_urlsafe(32), view.app_id)
    app = json_error_app()
    add_read_routes(app, view, Guard(auth))
    add_page_routes(app, auth)
    return app, auth


async def start_history_server(view: ArchiveView, host: str, port: int, user: str) -> tuple[web.AppRunner, str]:
    """Serve ``view``; (the runner, to clean up, and a one-time sign-in link for ``user``)."""
    app, auth = history_app(view)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0]
    return runner, f"http://{host}:{bound[1]}/ui/login?ticket={make_ticket(auth.token, user)}"
