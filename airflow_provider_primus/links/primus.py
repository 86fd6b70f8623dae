"""Extra links: the "Primus job" button of a submit task, right whether the job runs or ended."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseOperatorLink
from airflow.sdk.bases.xcom import BaseXCom
from airflow.sdk.configuration import conf

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

#: Where the provider's plugin serves the job page in the api-server (``plugins/job_page.py``).
JOB_PAGE_PREFIX = "/primus"
#: XCom keys the job page reads the task's job from (pushed by the submit operator).
APP_ID_KEY = "app_id"
CONN_ID_KEY = "primus_conn_id"


def job_page_url(dag_id: str, task_id: str, run_id: str, map_index: int, base_url: str | None) -> str:
    """The job page of one task instance in Airflow's api-server: ``[api] base_url`` + the plugin's
    route, or a path from the server's root when no base URL is configured (Airflow's UI opens a
    same-origin path as it is). It names the task instance, not the job: the page looks the job up
    when it is opened and checks that the user may see that task."""
    path = (f"{JOB_PAGE_PREFIX}/jobs/{quote(dag_id, safe='')}/{quote(task_id, safe='')}?"
            + urlencode({"run_id": run_id, "map_index": map_index}))
    return (base_url or "").rstrip("/") + path


def task_job_page_url(ti: Any) -> str:
    """``job_page_url`` of a task instance (anything with its ``dag_id``, ``task_id``, ``run_id`` and
    ``map_index``), with this installation's ``[api] base_url``."""
    map_index = -1 if ti.map_index is None else ti.map_index
    return job_page_url(ti.dag_id, ti.task_id, ti.run_id, map_index, conf.get("api", "base_url", fallback=None))


class PrimusJobLink(BaseOperatorLink):
    """"Primus job": the job's page through Airflow's api-server (the provider's plugin).

    While the job runs, the page redirects to the web page its AM serves (roles, executors, data,
    events, actions; it asks for the job token, or open the one-time link ``primus ui APP_ID``
    prints). Once the job ended, when the AM is gone, it says so: the outcome (state, reason, when,
    roles) and how to see the job's full page again (``primus ui APP_ID``, YARN's application page).

    The operator pushes the URL under ``xcom_key`` as soon as the job is submitted (Airflow 3's
    api-server shows what is in that XCom), so the link works while the task runs or is deferred.
    """

    name = "Primus job"
    xcom_key = "primus_job_url"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        # Airflow's own types disagree: the link gets a TaskInstanceKey (a NamedTuple, read-only), which
        # BaseXCom.get_value's TIKeyProtocol declares as settable; it only reads it.
        return BaseXCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""  # type: ignore[arg-type]
