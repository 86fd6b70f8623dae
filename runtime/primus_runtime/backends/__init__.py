"""The backends, in one registry: everything else asks it instead of naming a backend.

A backend is one package, ``backends/<name>/``:

- ``settings.py``: its section of the job spec (``backend: {type: <name>, ...}``), a pydantic
  model that only needs ``spec_types``; with the backend's static facts it is listed in
  ``catalogue.py``, the leaf the job spec imports to build its union;
- ``client.py``: its ``ClusterClient`` (``base.py``), used where jobs are submitted from (the CLI,
  Airflow): submit, find, read the status the AM left, logs, kill without the AM;
- ``executors.py``: its ``ExecutorBackend``, inside the AM: launch, watch and stop executors;
- ``am.py``: ``run_am(args)``, the AM's bootstrap on that backend: reads the job, builds the
  ``ExecutorBackend`` and the ``JobStore`` (where the AM publishes its address and saves its
  status) and serves (``am/main.serve``).

Client, AM and Airflow modules are imported on first use only: YARN's pull in skein, Kubernetes'
its client.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..spec_types import BackendSettings
from .catalogue import CATALOGUE as _CATALOGUE
from .catalogue import DEFAULT, DEFAULT_AM_ATTEMPTS, NAMES, SETTINGS, BackendFacts, ConnectionField, UnknownBackend

if TYPE_CHECKING:
    from .base import ClientOptions, ClusterClient

__all__ = ["BACKENDS", "DEFAULT", "DEFAULT_AM_ATTEMPTS", "NAMES", "SETTINGS", "BackendInfo", "ConnectionField",
           "UnknownBackend", "default_settings", "get", "of_app_id"]


@dataclasses.dataclass(frozen=True)
class BackendInfo(BackendFacts):
    """A backend's facts (``catalogue``) and how to run it."""

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

    def client_options(self, fields: Mapping[str, Any], options: ClientOptions) -> ClientOptions:
        """``options`` with what an Airflow connection's ``fields`` (its extra, by field name) say of
        this backend: each field's ``client_option`` (the provider adds what other Airflow providers'
        hooks give: ``airflow_provider_primus.backends``)."""
        return dataclasses.replace(options, **{field.client_option: fields.get(field.name)
                                               for field in self.connection_fields if field.client_option})

    def spec_defaults(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The fields of this backend's spec section that an Airflow connection's ``fields`` fill
        when a spec leaves them out."""
        return {field.spec_field: fields[field.name] for field in self.connection_fields
                if field.spec_field and fields.get(field.name)}


BACKENDS: dict[str, BackendInfo] = {
    facts.name: BackendInfo(**{f.name: getattr(facts, f.name) for f in dataclasses.fields(facts)})
    for facts in _CATALOGUE
}


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
