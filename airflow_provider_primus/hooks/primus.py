"""PrimusHook: the one place of the provider that knows Primus backends."""

from __future__ import annotations

import os
from collections import deque
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowNotFoundException

from primus_runtime.client import TERMINAL, PrimusClient
from primus_runtime.spec import JobSpec, SpecError

BACKENDS = ("local", "yarn", "kubernetes")
AVAILABLE_BACKENDS = ("local",)
#: Job states in which a job can still be reattached to (``lost``: the AM died without an outcome).
ACTIVE = ("pending", "starting", "running")
FINISHED = (*TERMINAL, "lost")

SpecLike = JobSpec | dict[str, Any] | str | os.PathLike


class PrimusHook(BaseHook):
    """Submit, find, watch and control Primus jobs through a ``primus`` connection.

    The connection's extra holds ``backend`` (``local``; ``yarn`` and ``kubernetes`` are not
    available yet) and, for the local backend, ``home`` (the Primus home, default
    ``$PRIMUS_HOME``, else ``~/.primus``).

    When the connection id is the default ``primus_default`` and no such connection exists, the
    hook uses the local backend with the default home, so the quickstart needs no setup. A
    connection id that is named explicitly must exist.

    :param primus_conn_id: the ``primus`` connection to use.
    :param timeout: seconds for each request to a job's Application Master.
    """

    conn_name_attr = "primus_conn_id"
    default_conn_name = "primus_default"
    conn_type = "primus"
    hook_name = "Primus"

    def __init__(self, primus_conn_id: str = default_conn_name, timeout: float = 10.0) -> None:
        super().__init__()
        self.primus_conn_id = primus_conn_id
        self.timeout = timeout

    # --- connection -------------------------------------------------------------

    @cached_property
    def settings(self) -> dict[str, Any]:
        """``backend`` and ``home`` from the connection (or the local defaults, see the class doc)."""
        try:
            conn = self.get_connection(self.primus_conn_id)
        except AirflowNotFoundException:
            if self.primus_conn_id != self.default_conn_name:
                raise
            self.log.info("No connection %r: using the local backend with the default Primus home",
                          self.primus_conn_id)
            return {"backend": "local", "home": None}
        extra = conn.extra_dejson

        def field(name: str) -> Any:  # forms may store the legacy prefixed key
            return extra.get(name) or extra.get(f"extra__primus__{name}") or None

        backend = field("backend") or "local"
        if backend not in BACKENDS:
            raise AirflowException(f"connection {self.primus_conn_id!r}: backend must be one of "
                                   f"{list(BACKENDS)}, got {backend!r}")
        return {"backend": backend, "home": field("home")}

    @cached_property
    def client(self) -> PrimusClient:
        settings = self.settings
        if settings["backend"] not in AVAILABLE_BACKENDS:
            raise AirflowException(f"connection {self.primus_conn_id!r}: the {settings['backend']} backend is "
                                   f"not available in this version yet (use 'local')")
        return PrimusClient(settings["home"], timeout=self.timeout)

    def get_conn(self) -> PrimusClient:
        return self.client

    # --- jobs -------------------------------------------------------------------

    def load_spec(self, spec: SpecLike, base_dir: str | os.PathLike | None = None) -> JobSpec:
        """A validated JobSpec (raises ``SpecError``). Relative paths (of a spec file, or the ``files``
        of a dict spec) are taken from ``base_dir`` when given."""
        if isinstance(spec, JobSpec):
            return spec
        if isinstance(spec, dict):
            return JobSpec.from_dict(spec, base_dir=base_dir)
        path = Path(spec).expanduser()
        if base_dir is not None and not path.is_absolute():
            path = Path(base_dir) / path
        return JobSpec.from_file(path)

    def submit(self, spec: SpecLike, tags: dict[str, Any] | None = None,
               base_dir: str | os.PathLike | None = None) -> str:
        """Submit a job; its application id. ``tags`` are merged into (and win over) the spec's tags.

        Raises ``SpecError`` for a spec that cannot run (nothing was started)."""
        job = self.load_spec(spec, base_dir)
        if tags:
            job = job.model_copy(deep=True)  # never change the caller's JobSpec
            job.tags = {**job.tags, **{str(k): str(v) for k, v in tags.items()}}
        if job.backend.type != self.settings["backend"]:
            raise SpecError([f"backend.type: connection {self.primus_conn_id!r} uses the "
                             f"{self.settings['backend']} backend, got {job.backend.type!r}"])
        app_id = self.client.submit(job)
        self.log.info("Submitted Primus job %s (%s)", app_id, job.name)
        return app_id

    def status(self, app_id: str) -> dict[str, Any]:
        """``job`` (state, reason, tags), ``roles``, ``executors`` and recent ``events``."""
        return self.client.status(app_id)

    def find_jobs(self, tags: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Jobs carrying all ``tags`` (app_id, name, state, tags), newest first."""
        return self.client.list({str(k): str(v) for k, v in (tags or {}).items()})

    def kill(self, app_id: str, reason: str = "", timeout: float | None = None,
             wait: bool = True) -> dict[str, Any] | None:
        """Stop the job (graceful, then by force); its final status. With ``wait=False`` only ask
        its AM to stop it (forcing it when no AM answers) and return None at once."""
        self.log.info("Killing Primus job %s: %s", app_id, reason or "no reason given")
        if wait:
            return self.client.kill(app_id, reason=reason, timeout=timeout)
        if not self.client.request_kill(app_id, reason, patience=1.0):
            self.client.cluster.force_kill(app_id)
        return None

    def scale(self, app_id: str, role: str, replicas: int) -> dict[str, Any]:
        """Resize ``role`` of a running job to ``replicas`` executors."""
        return self.client.scale(app_id, role, replicas)

    def tail_logs(self, app_id: str, role: str | None = None, index: int = 0, stream: str = "stdout",
                  lines: int = 20) -> str:
        """The last ``lines`` lines of an executor's log (``stream``: stdout/stderr/executor), or of the
        AM log when ``role`` is None."""
        path = self.client.log_path(app_id, role, index if role is not None else None, stream)
        tail: deque[str] = deque(maxlen=lines)
        pending = b""
        for chunk in self.client.follow_log(app_id, path):
            *complete, pending = (pending + chunk).split(b"\n")
            tail.extend(line.decode(errors="replace") for line in complete)
        if pending:
            tail.append(pending.decode(errors="replace"))
        return "\n".join(tail)
