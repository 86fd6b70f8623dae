"""Which job a task instance submitted and who may see it; the "Primus job" link's route.

Shared by the panel (``panel.py``) and the link's route:

- who may see a task instance's job: a user Airflow lets read that task instance
  (``requires_access_dag("GET", TASK_INSTANCE)``, the check of the task's extra-links endpoint: the
  JWT of the Authorization header or the UI's cookie); acting on the job needs what editing the task
  instance needs (``"PUT"``). Anyone else gets Airflow's 401/403 and learns nothing of the job;
- which job: the task instance's XComs the submit operator pushed (its app id and Primus
  connection), never the URL, so a link cannot be aimed at another job or connection.

``GET /primus/jobs/{dag_id}/{task_id}?run_id=...&map_index=...`` (``links/primus.job_page_url``, the
"Primus job" link, also of tasks run before the panel existed, maybe bookmarked) leads to the task
instance's Primus tab in Airflow's UI (it showed the AM's page or the job's outcome before).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import urlencode

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.configuration import conf
from airflow.models.xcom import XComModel
from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import RedirectResponse

from airflow_provider_primus.hooks.primus import PrimusHook
from airflow_provider_primus.links.primus import APP_ID_KEY, CONN_ID_KEY, JOB_PAGE_PREFIX, panel_tab_url

#: Seconds for each request to the job's AM or its cluster.
CLUSTER_TIMEOUT = 5.0
#: Seconds for a whole lookup; past them the panel says the cluster did not answer.
PAGE_TIMEOUT = 20.0


@dataclass(frozen=True)
class TaskJob:
    """The job a task instance submitted, as its XComs say."""

    app_id: str
    conn_id: str


# --- which task instance: the URL ------------------------------------------------------------

# Airflow's UI fills {MAP_INDEX} of an external view's href only on a mapped task's page: an
# unmapped task's tab asks with the placeholder itself.
_UNMAPPED = ("", "-1", "{MAP_INDEX}")


def map_index_param(map_index: Annotated[str, Query()] = "-1") -> int:
    """The task instance's map index (a FastAPI dependency): -1 for an unmapped task."""
    if map_index in _UNMAPPED:
        return -1
    if not re.fullmatch(r"\d{1,9}", map_index):
        raise HTTPException(422, f"map_index: a number or -1, got {map_index!r}")
    return int(map_index)


MapIndex = Annotated[int, Depends(map_index_param)]


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
             map_index: MapIndex) -> TaskJob:
    """The job of the task instance (a FastAPI dependency); 404 when it submitted none."""
    app_id = _xcom_text(session, APP_ID_KEY, dag_id, task_id, run_id, map_index)
    if app_id is None:
        raise HTTPException(404, f"task instance {dag_id}.{task_id} of run {run_id!r} (map index {map_index}) "
                                 "has submitted no Primus job")
    conn_id = _xcom_text(session, CONN_ID_KEY, dag_id, task_id, run_id, map_index)
    return TaskJob(app_id=app_id, conn_id=conn_id or PrimusHook.default_conn_name)


# --- who: Airflow's permissions on the task instance ---------------------------------------

#: Seeing the job: the same check as the task instance's extra-links endpoint. Acting on it: the
#: check of editing the task instance (clearing it, marking it failed). Module-level objects, so that
#: tests can override them.
can_read_task_instance = requires_access_dag("GET", DagAccessEntity.TASK_INSTANCE)
can_edit_task_instance = requires_access_dag("PUT", DagAccessEntity.TASK_INSTANCE)


# --- the link's route -------------------------------------------------------------

def airflow_root(request: Request) -> str:
    """The api-server's root path (its UI's too), from the root this app is mounted under."""
    return request.scope.get("root_path", "").removesuffix(JOB_PAGE_PREFIX)


def login_url(request: Request) -> str:
    """Airflow's login route (``/api/v2/auth/login``: the auth manager's login, with ``next`` checked
    to be on this server)."""
    return f"{airflow_root(request)}/api/v2/auth/login?" + urlencode({"next": str(request.url)})


router = APIRouter()


@router.get("/jobs/{dag_id}/{task_id}", dependencies=[Depends(can_read_task_instance)])
def job_page(request: Request, dag_id: str, task_id: str, run_id: Annotated[str, Query()],
             map_index: MapIndex) -> RedirectResponse:
    """The task instance's Primus tab in Airflow's UI (the panel says whether it submitted a job)."""
    base_url = conf.get("api", "base_url", fallback=None) or airflow_root(request)
    return RedirectResponse(panel_tab_url(dag_id, task_id, run_id, map_index, base_url), status_code=307)
