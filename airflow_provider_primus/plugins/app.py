"""The plugin's FastAPI app, mounted by Airflow's api-server under ``/primus``: the panel
(``panel.py``), its static files, and the "Primus job" link's route (``job_page.py``)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_provider_primus.plugins import job_page, panel


def create_app() -> FastAPI:
    app = FastAPI(title="Primus", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(StarletteHTTPException)
    async def signed_out(request: Request, exc: StarletteHTTPException) -> Response:
        """A browser that is not signed in goes to Airflow's login, which brings it back here; the
        panel's requests and API clients (no HTML accepted) get Airflow's JSON 401 as before."""
        if exc.status_code == 401 and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(job_page.login_url(request), status_code=303)
        return await http_exception_handler(request, exc)

    app.include_router(job_page.router)
    app.include_router(panel.router)
    app.mount("/static", StaticFiles(directory=panel.STATIC_DIR), name="static")
    return app
