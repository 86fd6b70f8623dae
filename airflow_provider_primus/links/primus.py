"""Extra links: the job's live status page, shown on the task while the job runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.bases.xcom import BaseXCom

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey


class PrimusJobLink(BaseOperatorLink):
    """"Primus job": the web page the job's AM serves (roles, executors, data, events, actions).

    The operator pushes the URL under ``xcom_key`` as soon as the AM publishes its address, so
    the link works while the task runs or is deferred. The page asks for the job token (or open
    the one-time link ``primus ui APP_ID`` prints). It lives as long as the AM does: after the job
    ended, ``primus ui APP_ID`` serves it again from the job's history.
    """

    name = "Primus job"
    xcom_key = "primus_job_url"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        # Airflow's own types disagree: the link gets a TaskInstanceKey (a NamedTuple, read-only), which
        # BaseXCom.get_value's TIKeyProtocol declares as settable; it only reads it.
        return BaseXCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""  # type: ignore[arg-type]
