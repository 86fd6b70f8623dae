"""The "Primus job" link's target in Airflow's api-server: the job's page, whether it runs or ended.

``GET /primus/jobs/{dag_id}/{task_id}?run_id=...&map_index=...`` (``links/primus.job_page_url``):

- who may open it: a user Airflow lets read that task instance (``requires_access_dag("GET",
  TASK_INSTANCE)``, the check of the task's extra-links endpoint: the JWT of the Authorization
  header or the UI's cookie); a browser that is not signed in is sent to Airflow's login, which
  brings it back here; anyone else gets Airflow's 401/403 and learns nothing of the job;
- which job: the task instance's XComs the submit operator pushed (its app id and Primus
  connection), never the URL, so a link cannot be aimed at another job or connection;
- while the job runs and its AM serves the page: a redirect there (it asks for the job token);
  once it ended (the AM is gone): a plain page with the outcome and how to see the full page again
  (``primus ui APP_ID``; YARN's application page, which outlives the AM).

Looking the job up never hangs the request: every request to the AM or the cluster is bounded
(``CLUSTER_TIMEOUT``) and the whole lookup too (``PAGE_TIMEOUT``); an unreachable cluster is
said so. Nothing here carries the job token: the hook reads it only to ask the AM for the status.
"""

from __future__ import annotations

import asyncio
import html
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, Any
from urllib.parse import urlencode

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.models.xcom import XComModel
from airflow.sdk.exceptions import AirflowNotFoundException
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_primus.hooks.primus import FINISHED, PrimusHook
from airflow_provider_primus.links.primus import APP_ID_KEY, CONN_ID_KEY, JOB_PAGE_PREFIX
from primus_runtime.client import JobNotFound, progress_line
from primus_runtime.home import default_home
from primus_runtime.models import StatusSummary

#: Seconds for each request to the job's AM or its cluster.
CLUSTER_TIMEOUT = 5.0
#: Seconds for the whole lookup; past them the page says the cluster did not answer.
PAGE_TIMEOUT = 20.0


@dataclass(frozen=True)
class TaskJob:
    """The job a task instance submitted, as its XComs say."""

    app_id: str
    conn_id: str


@dataclass(frozen=True)
class JobFacts:
    """What the page shows of a job, read from its AM or from what the AM left."""

    status: StatusSummary
    am_page: str | None  # the AM's own page, while it serves one
    cluster_page: str | None  # the cluster's page of the job (YARN), which outlives the AM
    ui_command: str  # `primus ui APP_ID` with what it needs to find the job
    connection: str  # the Airflow connection it was read through, as the page names it


# --- which job: the task instance's XComs --------------------------------------------------

def _xcom_text(session: Any, key: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> str | None:
    """One XCom of the task instance as the string the operator pushed (stored as JSON), else None.
    Read as JSON only, never deserialized into objects: an XCom is data, not code."""
    raw = session.execute(
        XComModel.get_many(key=key, run_id=run_id, dag_ids=dag_id, task_ids=task_id, map_indexes=map_index)
        .with_only_columns(XComModel.value)
    ).scalar()
    if raw is None:
        return None
    try:
        value = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    except ValueError:
        value = raw
    return value if isinstance(value, str) and value else None


def task_job(dag_id: str, task_id: str, session: SessionDep, run_id: Annotated[str, Query()],
             map_index: Annotated[int, Query()] = -1) -> TaskJob:
    """The job of the task instance (a FastAPI dependency); 404 when it submitted none."""
    app_id = _xcom_text(session, APP_ID_KEY, dag_id, task_id, run_id, map_index)
    if app_id is None:
        raise HTTPException(404, f"task instance {dag_id}.{task_id} of run {run_id!r} (map index {map_index}) "
                                 "has submitted no Primus job")
    conn_id = _xcom_text(session, CONN_ID_KEY, dag_id, task_id, run_id, map_index)
    return TaskJob(app_id=app_id, conn_id=conn_id or PrimusHook.default_conn_name)


#: The same check as the task instance's extra-links endpoint (a module-level object, so tests
#: can override it).
can_read_task_instance = requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE)


# --- the job: its AM or what it left ------------------------------------------------------

def look_up(job: TaskJob) -> JobFacts:
    """The job's status and pages (blocking: the AM, the cluster, the metadata DB for the connection)."""
    hook = PrimusHook(primus_conn_id=job.conn_id, timeout=CLUSTER_TIMEOUT)
    # The client's read, not the hook's: a person waits for this page, so no retries with backoff; an
    # unreachable cluster is said at once.
    status = hook.client.status(job.app_id, summary=True)  # the page shows the job and its roles' counts
    running = status.job.state not in FINISHED
    return JobFacts(status=status, am_page=hook.job_url(job.app_id, wait=0) if running else None,
                    cluster_page=hook.client.cluster_for(job.app_id).app_page_url(job.app_id),
                    ui_command=ui_command(hook, job.app_id), connection=connection_named(hook))


def connection_named(hook: PrimusHook) -> str:
    """The connection as the page names it: the default one may not exist (the local backend then)."""
    try:
        hook.get_connection(hook.primus_conn_id)
    except AirflowNotFoundException:
        return f"none ({hook.primus_conn_id} is not defined: the local backend, Primus home {default_home()})"
    return hook.primus_conn_id


def ui_command(hook: PrimusHook, app_id: str) -> str:
    """``primus ui APP_ID`` with the options that find the job where the connection says it is."""
    return hook.client.cluster_for(app_id).cli_command("ui", app_id)


async def job_response(job: TaskJob, timeout: float = PAGE_TIMEOUT) -> Response:
    """The redirect to the AM's page while it serves one, else a page that says how the job stands."""
    try:
        facts = await asyncio.wait_for(asyncio.to_thread(look_up, job), timeout)
    except asyncio.TimeoutError:
        return problem_page(504, job, f"the job's cluster did not answer within {timeout:g} s; try again later")
    except JobNotFound:
        return problem_page(404, job, f"no job {job.app_id} where connection {job.conn_id!r} points (it may have "
                                      "been removed)")
    except AirflowNotFoundException as exc:
        return problem_page(404, job, str(exc))
    except (ConnectionError, OSError) as exc:
        return problem_page(502, job, f"the job's cluster is unreachable: {_short(exc)}")
    if facts.am_page is not None:
        return RedirectResponse(facts.am_page, status_code=307)
    return HTMLResponse(outcome_page(job, facts))


# --- the pages ------------------------------------------------------------------------------

_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:60em}th{text-align:left;padding-right:1em;"
          "vertical-align:top}code{background:#f2f2f2;padding:0 .3em}")


def _page(title: str, body: str, refresh: int | None = None) -> str:
    meta = f'<meta http-equiv="refresh" content="{refresh}">' if refresh else ""
    return (f'<!doctype html><html><head><meta charset="utf-8">{meta}<title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")


def _when(epoch: Any) -> str:
    if not isinstance(epoch, (int, float)) or not epoch:
        return "unknown"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(exc: BaseException, limit: int = 300) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


# "it killed" said the opposite of what happened: the job was killed.
_OUTCOME_WORDS = {"succeeded": "succeeded", "failed": "failed", "killed": "was killed"}


def _headline(state: str) -> str:
    if state == "lost":
        return "The job is over: its AM is gone without recording an outcome (lost)."
    if state in FINISHED:
        return f"The job is over: it {_OUTCOME_WORDS.get(state, html.escape(state))}."
    return (f"The job is {html.escape(state)}: its AM does not serve its page (yet). This page follows it: "
            "it reloads every 5 seconds and leads to the job's page once the AM serves it.")


def outcome_page(job: TaskJob, facts: JobFacts) -> str:
    """The job's outcome (or, before its AM serves a page, its state) and how to see its full page."""
    summary = facts.status.job
    state = str(summary.state)
    rows = [("Job", f"{summary.name} ({job.app_id})"), ("State", state),
            ("Reason", summary.reason or ""), ("Ended at", _when(summary.finished_at)),
            ("Roles", progress_line(facts.status)), ("Airflow connection", facts.connection)]
    if state not in FINISHED:
        rows = [row for row in rows if row[0] != "Ended at"]
    table = "".join(f"<tr><th>{html.escape(name)}</th><td>{html.escape(str(value))}</td></tr>"
                    for name, value in rows)
    body = f"<p>{_headline(state)}</p><table>{table}</table>"
    if state in FINISHED:
        body += ("<h2>The job's full page</h2><p>Its AM served it while the job ran. To see it again (roles, "
                 "executors, logs, data, events), run this where the job's Primus home or cluster configuration "
                 f"is at hand, and open the link it prints:</p><p><code>{html.escape(facts.ui_command)}</code></p>")
    if facts.cluster_page:
        body += (f'<p>The cluster\'s page of the application: <a href="{html.escape(facts.cluster_page)}">'
                 f"{html.escape(facts.cluster_page)}</a></p>")
    return _page(f"Primus job {job.app_id}: {state}", body, refresh=None if state in FINISHED else 5)


def problem_page(status_code: int, job: TaskJob, problem: str) -> HTMLResponse:
    body = (f"<p>Cannot show Primus job {html.escape(job.app_id)} (connection {html.escape(job.conn_id)}): "
            f"{html.escape(problem)}.</p>")
    return HTMLResponse(_page(f"Primus job {job.app_id}", body), status_code=status_code)


# --- the app --------------------------------------------------------------------------------

def login_url(request: Request) -> str:
    """Airflow's login route (``/api/v2/auth/login``: the auth manager's login, with ``next`` checked
    to be on this server), from the api-server's root this app is mounted under."""
    root = request.scope.get("root_path", "").removesuffix(JOB_PAGE_PREFIX)
    return f"{root}/api/v2/auth/login?" + urlencode({"next": str(request.url)})


def create_app() -> FastAPI:
    """The plugin's FastAPI app, mounted by the api-server under ``/primus``."""
    app = FastAPI(title="Primus", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(StarletteHTTPException)
    async def signed_out(request: Request, exc: StarletteHTTPException) -> Response:
        """A browser that is not signed in goes to Airflow's login, which brings it back here; an API
        client (no HTML accepted) gets Airflow's JSON 401 as before."""
        if exc.status_code == 401 and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(login_url(request), status_code=303)
        return await http_exception_handler(request, exc)

    @app.get("/jobs/{dag_id}/{task_id}", dependencies=[Depends(can_read_task_instance)],
             response_class=HTMLResponse)
    async def job_page(job: Annotated[TaskJob, Depends(task_job)]) -> Response:
        return await job_response(job)

    return app
