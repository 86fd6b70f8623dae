"""Extra links: the "Primus job" button of a submit task, right whether the job runs or ended."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseOperatorLink
from airflow.sdk.bases.xcom import BaseXCom
from airflow.sdk.configuration import conf

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

#: Where the provider's plugin serves its app in the api-server (``plugins/app.py``): the panel, its API,
#: and the link's route ``/primus/jobs/...``, which leads to the panel.
JOB_PAGE_PREFIX = "/primus"
#: The panel's tab in Airflow's UI: the plugin's external view's ``url_route`` (``plugins/__init__.py``).
PANEL_URL_ROUTE = "primus"
#: XCom keys the panel reads the task's job from (pushed by the submit operator).
APP_ID_KEY = "app_id"
CONN_ID_KEY = "primus_conn_id"


def job_page_url(dag_id: str, task_id: str, run_id: str, map_index: int, base_url: str | None) -> str:
    """The "Primus job" link of one task instance: the plugin's route in Airflow's api-server
    (``[api] base_url`` + ``/primus/jobs/...``, or a path from the server's root when no base URL is
    configured: Airflow's UI opens a same-origin path as it is), which leads to the task instance's
    Primus tab (``panel_tab_url``). It names the task instance, not the job: the panel looks the job up
    when it is opened and checks that the user may see that task. (A route of the plugin rather than
    the tab itself: links pushed before the panel existed lead there too.)"""
    path = (f"{JOB_PAGE_PREFIX}/jobs/{quote(dag_id, safe='')}/{quote(task_id, safe='')}?"
            + urlencode({"run_id": run_id, "map_index": map_index}))
    return (base_url or "").rstrip("/") + path


def panel_tab_url(dag_id: str, task_id: str, run_id: str, map_index: int, base_url: str | None) -> str:
    """The Primus tab of one task instance's page in Airflow's UI (the plugin's panel): ``base_url`` +
    the UI's route of the task instance (``/mapped/{map_index}`` for a mapped one, as the UI has it) +
    ``/plugin/primus``."""
    path = (f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
            + (f"/mapped/{map_index}" if map_index >= 0 else "") + f"/plugin/{PANEL_URL_ROUTE}")
    return (base_url or "").rstrip("/") + path


def task_job_page_url(ti: Any) -> str:
    """``job_page_url`` of a task instance (anything with its ``dag_id``, ``task_id``, ``run_id`` and
    ``map_index``), with this installation's ``[api] base_url``."""
    map_index = -1 if ti.map_index is None else ti.map_index
    return job_page_url(ti.dag_id, ti.task_id, ti.run_id, map_index, conf.get("api", "base_url", fallback=None))


class PrimusJobLink(BaseOperatorLink):
    """"Primus job": the task instance's Primus tab in Airflow's UI (the provider's plugin's panel), through
    the plugin's route ``job_page_url``.

    The panel shows the job live (roles, executors, data, events, charts; actions for a user Airflow
    lets edit the task instance), signed in by Airflow: nobody types the job token, which never
    reaches the browser. Once the job ended it shows its final page, from what the AM left.

    The operator pushes the URL under ``xcom_key`` as soon as the job is submitted (Airflow 3's
    api-server shows what is in that XCom), so the link works while the task runs or is deferred.
    """

    name = "Primus job"
    xcom_key = "primus_job_url"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        # Airflow's own types disagree: the link gets a TaskInstanceKey (a NamedTuple, read-only), which
        # BaseXCom.get_value's TIKeyProtocol declares as settable; it only reads it.
        return BaseXCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""  # type: ignore[arg-type]
