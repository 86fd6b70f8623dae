"""The backends, in one registry: everything else asks it instead of naming a backend.

A backend is one package, ``backends/<name>/``:

- ``settings.py``: its section of the job spec (``backend: {type: <name>, ...}``), a pydantic
  model that only needs ``spec_types`` (the job spec imports it to build its union);
- ``client.py``: its ``ClusterClient`` (``base.py``), used where jobs are submitted from (the CLI,
  Airflow): submit, find, read the status the AM left, logs, kill without the AM;
- ``executors.py``: its ``ExecutorBackend``, inside the AM: launch, watch and stop executors;
- ``am.py``: ``run_am(args)``, the AM's bootstrap on that backend: reads the job, builds the
  ``ExecutorBackend`` and the ``JobStore`` (where the AM publishes its address and saves its
  status) and serves (``am/main.serve``).

Client and AM modules are imported on first use only: YARN's pull in skein, Kubernetes' its client.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..spec_types import BackendSettings
from .kubernetes.settings import KubernetesBackend
from .local.settings import LocalBackend
from .yarn.settings import YarnBackend

if TYPE_CHECKING:
    from .base import ClientOptions, ClusterClient


@dataclass(frozen=True)
class BackendInfo:
    name: str
    settings: type[BackendSettings]  # its spec section; the field ``type`` (its name) tells them apart
    owns: Callable[[str], bool]  # whether an application id is one of its jobs
    summary: str
    # Whether its AM and executors see the submitting machine's files (local paths in a spec work).
    shares_files_with_client: bool = False
    # Whether its submit makes the job's CA and its AM serves TLS (``am.tls``).
    serves_tls: bool = False
    # Whether a new AM attempt adopts the executors still running (trainers untouched): such a
    # backend restarts a dead AM by default (``am.max_attempts`` unset: DEFAULT_AM_ATTEMPTS).
    adopts_executors: bool = False

    @property
    def package(self) -> str:
        return f"{__name__}.{self.name}"

    def client(self, options: ClientOptions) -> ClusterClient:
        """This backend's ClusterClient for ``options`` (the connection's settings)."""
        return importlib.import_module(f"{self.package}.client").cluster_client(options)

    async def run_am(self, args: list[str]) -> int:
        """Run a job's AM on this backend (``python -m primus_runtime.am --backend NAME ARGS``)."""
        run: Any = importlib.import_module(f"{self.package}.am").run_am
        return int(await run(args))


def _is_local(app_id: str) -> bool:
    return app_id.startswith("primus-")


def _is_yarn(app_id: str) -> bool:
    return app_id.startswith("application_")


def _is_kubernetes(app_id: str) -> bool:
    return app_id.startswith("k8s.")


BACKENDS: dict[str, BackendInfo] = {
    info.name: info for info in (
        BackendInfo("local", LocalBackend, _is_local, "processes on this machine", shares_files_with_client=True,
                    serves_tls=True, adopts_executors=True),
        # A new YARN application attempt starts every executor again (skein keeps no container
        # across attempts): a restart costs the trainers' state, so it is the user's choice.
        BackendInfo("yarn", YarnBackend, _is_yarn, "a YARN application through skein", serves_tls=True),
        BackendInfo("kubernetes", KubernetesBackend, _is_kubernetes, "an AM pod and executor pods",
                    adopts_executors=True),
    )
}
NAMES = tuple(BACKENDS)
# AM attempts when the spec does not say, on a backend that adopts executors (1 on the others).
DEFAULT_AM_ATTEMPTS = 3
SETTINGS = tuple(info.settings for info in BACKENDS.values())


class UnknownBackend(LookupError):
    pass


def get(name: str) -> BackendInfo:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownBackend(f"backend must be one of {list(NAMES)}, got {name!r}") from None


def of_app_id(app_id: str) -> BackendInfo:
    """The backend a job id belongs to (ids say it: ``primus-...`` local, ``application_...`` YARN,
    ``k8s.<namespace>.<name>`` Kubernetes)."""
    for info in BACKENDS.values():
        if info.owns(app_id):
            return info
    raise UnknownBackend(f"{app_id!r} is not a job id of any backend ({', '.join(NAMES)})")


def default_settings(name: str) -> BackendSettings:
    """A backend's spec section with its defaults (``primus submit --backend NAME``)."""
    return get(name).settings.model_validate({"type": name})
