"""The provider's Airflow plugin: the Primus panel, a tab of every task instance's page in Airflow's UI
(an external view, Airflow 3.1+) served by the plugin's FastAPI app in the api-server (``app.py``:
``panel.py``, and ``job_page.py``, the "Primus job" link's route, which leads to the tab).

Registered through the ``airflow.plugins`` entry point (pyproject.toml), which Airflow loads in every
component; provider-declared plugins (``get_provider_info()["plugins"]``) are only loaded with
``[core] lazy_discover_providers = False``, and declaring both would load it twice.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_primus.links.primus import JOB_PAGE_PREFIX, PANEL_URL_ROUTE


class LazyJobPageApp:
    """An ASGI app that builds the plugin's FastAPI app (``app.create_app``) on its first request.

    Every Airflow process loads entry-point plugins (workers, the scheduler, ...); only the
    api-server serves this app, so the others never import FastAPI or the api-server's security
    code for it.
    """

    def __init__(self) -> None:
        self._app: Any = None
        self._lock = threading.Lock()

    def _built(self) -> Any:
        if self._app is None:
            with self._lock:
                if self._app is None:
                    from airflow_provider_primus.plugins.app import create_app

                    self._app = create_app()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._built()(scope, receive, send)


#: The panel as a tab of every task instance's page: Airflow's UI fills in the placeholders (URI-encoded;
#: {MAP_INDEX} on a mapped task's page only, the panel takes the placeholder as -1) and shows the href
#: in a same-origin iframe, so Airflow's session cookie signs the panel in. Airflow 3.3 cannot show it
#: for some operators only: for a task that submitted no job, the panel says so.
PANEL_VIEW = {
    "name": "Primus",
    "href": f"{JOB_PAGE_PREFIX}/panel/{{DAG_ID}}/{{TASK_ID}}?run_id={{RUN_ID}}&map_index={{MAP_INDEX}}",
    "destination": "task_instance",
    "url_route": PANEL_URL_ROUTE,
    "icon": f"{JOB_PAGE_PREFIX}/static/primus.svg",
}


class PrimusPlugin(AirflowPlugin):
    name = "primus"
    fastapi_apps = [{"app": LazyJobPageApp(), "url_prefix": JOB_PAGE_PREFIX, "name": "Primus panel"}]
    external_views = [PANEL_VIEW]
