"""The Primus panel: a task instance's Primus job, live, in a tab of its page in Airflow's UI.

The plugin's external view (``plugins/__init__.py``) makes Airflow's UI show ``GET /primus/panel/...``
in an iframe of the same origin, so Airflow's session cookie signs the panel in: nobody types the job
token, which never leaves the api-server (the hook reads it to ask the job's AM; no reply here holds it).

- ``GET /primus/panel/{dag_id}/{task_id}?run_id=&map_index=``: the page (``static/panel.*``), which polls
- ``GET /primus/api/panel/{dag_id}/{task_id}?run_id=&map_index=&since=``: ``PanelReply``, the job's
  status and timeline (samples after ``since``), live from its AM, or what the AM left once it ended;
- ``POST /primus/api/panel/{dag_id}/{task_id}/{kill,scale,restart}?run_id=&map_index=``: the actions,
  each recorded by the AM with the Airflow user's name.

Seeing needs what reading the task instance needs, acting what editing it needs (``job_page.py``);
the job is the one the task instance's XComs name. Every request to the job's AM or cluster runs in
a thread, bounded (``CLUSTER_TIMEOUT`` each, ``PAGE_TIMEOUT`` in all).
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, TypeVar
from urllib.parse import quote, urlencode, urlsplit

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.configuration import conf
from airflow.models.dag import DagModel
from airflow.sdk.exceptions import AirflowNotFoundException
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import BaseModel, Field

from airflow_provider_primus.hooks.primus import FINISHED, PrimusHook
from airflow_provider_primus.plugins.job_page import (
    CLUSTER_TIMEOUT,
    PAGE_TIMEOUT,
    MapIndex,
    TaskJob,
    can_edit_task_instance,
    can_read_task_instance,
    task_job,
)
from primus_runtime.api_client import AMRejected
from primus_runtime.client import JobNotFound, JobUnreachable, PrimusClient
from primus_runtime.home import default_home
from primus_runtime.models import ExecutorsReply, StatusSummary, TimelineReply

STATIC_DIR = Path(__file__).resolve().parent / "static"
T = TypeVar("T")

# The page's scripts and styles are files of this app, nothing inline, nothing from elsewhere; only
# Airflow's UI (this origin) may frame it.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; frame-ancestors 'self'; base-uri 'none'; "
                                           "form-action 'none'",
                "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
API_HEADERS = {"Cache-Control": "no-store"}

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
#: Executor rows in one reply: the panel polls every 3 s, and a job of 10,000 executors would make
#: that megabytes each time; the roles' counts cover them all.
EXECUTOR_ROWS = 200


class PanelReply(BaseModel):
    """``GET /primus/api/panel/...``: what the panel shows of the task instance's job."""

    app_id: str
    connection: str = Field(description="The Airflow connection the job is read through, as the panel names it")
    can_edit: bool = Field(description="Airflow lets this user edit the task instance: the panel offers actions")
    live: bool = Field(description="The job has not ended: its AM serves it and takes actions")
    status: StatusSummary = Field(description="The job's status: its state, roles' counts, events, data, goodput")
    executors: ExecutorsReply = Field(description=f"The first {EXECUTOR_ROWS} of its current executors (`total`: "
                                                  "how many it has)")
    timeline: TimelineReply | None = Field(description="The charts' samples after `since`; null: none kept")
    cluster_page: str | None = Field(description="The cluster's page of the job (YARN), which outlives the AM")
    ui_command: str = Field(description="`primus ui APP_ID`: the job's full page, where its files are at hand")


class KillBody(BaseModel):
    reason: str = Field("", max_length=500)


class ScaleBody(BaseModel):
    role: str = Field(pattern=_NAME)
    replicas: int = Field(ge=0, le=100_000)


class RestartBody(BaseModel):
    executor: str = Field(pattern=_NAME, description="`<role>-<index>`")
    reason: str = Field("", max_length=500)


class ActionReply(BaseModel):
    message: str = Field(description="What was done, in words")


# --- who may act --------------------------------------------------------------------------

def may_edit_task_instance(request: Request, user: GetUserDep) -> bool:
    """Whether Airflow lets this user edit the task instance: the check ``can_edit_task_instance``
    makes (``requires_access_dag("PUT", TASK_INSTANCE)``), as an answer rather than a 403."""
    dag_id = request.path_params["dag_id"]
    return get_auth_manager().is_authorized_dag(
        method="PUT", access_entity=DagAccessEntity.TASK_INSTANCE,
        details=DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id)), user=user)


def _origin(url: str | None) -> str | None:
    parts = urlsplit(url or "")
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else None


def same_origin_json(request: Request) -> None:
    """Refuse an action another site could make a signed-in browser send.

    The actions are authenticated by Airflow's session cookie, which a browser also attaches to a
    request another page makes it send. A cross-site HTML form can only post urlencoded, multipart or
    text/plain bodies, and a cross-site ``fetch`` with a JSON body needs a CORS preflight Airflow does
    not grant: requiring ``application/json`` stops both. The Origin (or, without one, the Referer)
    must be this server's (as the request reached it, or ``[api] base_url``): that stops what the
    cookie's SameSite=Lax lets through, another origin of the same site (another port or subdomain)."""
    content_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if content_type != "application/json":
        raise HTTPException(415, "an action is a JSON body (Content-Type: application/json)")
    sender = _origin(request.headers.get("origin")) or _origin(request.headers.get("referer"))
    ours = {_origin(str(request.base_url)), _origin(conf.get("api", "base_url", fallback=None))}
    if sender is None or sender not in ours:
        raise HTTPException(403, "refused: an action must come from this server's own pages (Origin or Referer)")


# --- the job, read and acted on through the hook ----------------------------------------------

def job_client(job: TaskJob, user: str | None = None) -> tuple[PrimusHook, PrimusClient]:
    """The hook of the job's connection and its client, which asks the AM as ``user`` (the AM records
    that name with an action)."""
    hook = PrimusHook(primus_conn_id=job.conn_id, timeout=CLUSTER_TIMEOUT, announce_fallback=False)
    client = hook.client
    if user:
        client.user = user
    return hook, client


def connection_named(hook: PrimusHook) -> str:
    """The connection as the panel names it: the default one may not exist (the local backend then)."""
    try:
        hook.get_connection(hook.primus_conn_id)
    except AirflowNotFoundException:
        return f"none ({hook.primus_conn_id} is not defined: the local backend, Primus home {default_home()})"
    return hook.primus_conn_id


def read_panel(job: TaskJob, since: float, can_edit: bool) -> PanelReply:
    """What the panel shows (blocking: the AM, the cluster, the metadata DB for the connection)."""
    hook, client = job_client(job)
    # The client's read, not the hook's: a person waits, so no retries with backoff; an unreachable
    # cluster is said at once. A finished job's is what its AM left (its final status).
    status = client.status(job.app_id, summary=True)
    live = status.job.state not in FINISHED
    cluster = client.cluster_for(job.app_id)
    return PanelReply(app_id=job.app_id, connection=connection_named(hook), can_edit=can_edit, live=live,
                      status=status, executors=client.executors(job.app_id, limit=EXECUTOR_ROWS),
                      timeline=client.timeline(job.app_id, since),
                      cluster_page=cluster.app_page_url(job.app_id), ui_command=cluster.cli_command("ui", job.app_id))


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


async def bounded(job: TaskJob, work: Callable[[], T], timeout: float = PAGE_TIMEOUT) -> T:
    """``work()`` in a thread, given at most ``timeout`` seconds; what went wrong as an HTTP error
    that says it in words (the panel shows it)."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(work), timeout)
    except asyncio.TimeoutError:
        raise HTTPException(504, f"the job's cluster did not answer within {timeout:g} s; try again later") from None
    except JobNotFound:
        raise HTTPException(404, f"no job {job.app_id} where connection {job.conn_id!r} points (it may have been "
                                 "removed)") from None
    except AirflowNotFoundException as exc:
        raise HTTPException(404, str(exc)) from None
    except AMRejected as exc:  # the AM's own words; its refusal of our credentials is not the user's 401
        raise HTTPException(exc.status if exc.status not in (401, 403) else 502,
                            f"the job's AM refused: {exc.message}") from None
    except JobUnreachable as exc:
        raise HTTPException(409, str(exc)) from None
    except (ConnectionError, OSError) as exc:
        raise HTTPException(502, f"the job's cluster is unreachable: {_short(exc)}") from None


def kill_job(job: TaskJob, user: str, reason: str) -> ActionReply:
    _, client = job_client(job, user)
    if not client.request_kill(job.app_id, reason or f"killed by {user} from Airflow", patience=CLUSTER_TIMEOUT):
        raise JobUnreachable(f"job {job.app_id}: its AM did not answer: it cannot be killed from here now")
    return ActionReply(message=f"asked the AM to kill job {job.app_id}")


def scale_role(job: TaskJob, user: str, body: ScaleBody) -> ActionReply:
    hook, _ = job_client(job, user)
    reply = hook.scale(job.app_id, body.role, body.replicas)
    return ActionReply(message=f"role {reply.role} scaled to {reply.replicas} replicas")


def restart_executor(job: TaskJob, user: str, body: RestartBody) -> ActionReply:
    _, client = job_client(job, user)
    reply = client.restart(job.app_id, body.executor, body.reason or f"restarted by {user} from Airflow")
    return ActionReply(message=f"{reply.executor}: stopping incarnation {reply.incarnation}; its replacement follows")


# --- the routes -----------------------------------------------------------------------------

@cache
def _page_template() -> str:
    return (STATIC_DIR / "panel.html").read_text()


def panel_html(root: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> str:
    """The page, told where its API and static files are (below ``root``, this app's mount)."""
    api = (f"{root}/api/panel/{quote(dag_id, safe='')}/{quote(task_id, safe='')}?"
           + urlencode({"run_id": run_id, "map_index": map_index}))
    return (_page_template().replace("__PANEL_API__", html.escape(api))
            .replace("__STATIC__", html.escape(f"{root}/static")))


router = APIRouter()
TaskJobDep = Annotated[TaskJob, Depends(task_job)]
ACTION_CHECKS = [Depends(same_origin_json), Depends(can_edit_task_instance)]


@router.get("/panel/{dag_id}/{task_id}", dependencies=[Depends(can_read_task_instance)],
            response_class=HTMLResponse)
def panel_page(request: Request, dag_id: str, task_id: str, run_id: Annotated[str, Query()],
               map_index: MapIndex) -> Response:
    """The page; it finds out itself whether the task instance submitted a job (its API says)."""
    text = panel_html(request.scope.get("root_path", ""), dag_id, task_id, run_id, map_index)
    return HTMLResponse(text, headers=PAGE_HEADERS)


@router.get("/api/panel/{dag_id}/{task_id}", dependencies=[Depends(can_read_task_instance)])
async def panel_data(job: TaskJobDep, can_edit: Annotated[bool, Depends(may_edit_task_instance)],
                     since: Annotated[float, Query(ge=0)] = 0.0) -> Response:
    reply = await bounded(job, lambda: read_panel(job, since, can_edit))
    return Response(reply.model_dump_json(), media_type="application/json", headers=API_HEADERS)


@router.post("/api/panel/{dag_id}/{task_id}/kill", dependencies=ACTION_CHECKS)
async def kill(job: TaskJobDep, user: GetUserDep, body: KillBody) -> ActionReply:
    return await bounded(job, lambda: kill_job(job, user.get_name(), body.reason))


@router.post("/api/panel/{dag_id}/{task_id}/scale", dependencies=ACTION_CHECKS)
async def scale(job: TaskJobDep, user: GetUserDep, body: ScaleBody) -> ActionReply:
    return await bounded(job, lambda: scale_role(job, user.get_name(), body))


@router.post("/api/panel/{dag_id}/{task_id}/restart", dependencies=ACTION_CHECKS)
async def restart(job: TaskJobDep, user: GetUserDep, body: RestartBody) -> ActionReply:
    return await bounded(job, lambda: restart_executor(job, user.get_name(), body))
