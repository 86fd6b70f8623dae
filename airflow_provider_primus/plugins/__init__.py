"""The provider's Airflow plugin: the "Primus job" link's page in the api-server (``job_page.py``).

Registered through the ``airflow.plugins`` entry point (pyproject.toml), which Airflow loads in every
component; provider-declared plugins (``get_provider_info()["plugins"]``) are only loaded with
``[core] lazy_discover_providers = False``, and declaring both would load it twice.
"""

from __future__ import annotations

import threading
from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_primus.links.primus import JOB_PAGE_PREFIX


class LazyJobPageApp:
    """An ASGI app that builds the FastAPI app of ``job_page`` on its first request.

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
                    from airflow_provider_primus.plugins.job_page import create_app

                    self._app = create_app()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._built()(scope, receive, send)


class PrimusPlugin(AirflowPlugin):
    name = "primus"
    fastapi_apps = [{"app": LazyJobPageApp(), "url_prefix": JOB_PAGE_PREFIX, "name": "Primus job pages"}]
