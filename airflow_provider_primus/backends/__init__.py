"""What the provider adds to a backend's client options through other Airflow providers.

A module here named after a backend (``kubernetes.py``) has ``client_options(fields, options)``;
``PrimusHook`` calls it after the runtime registry's own mapping. The runtime never imports
Airflow, so this glue lives on the provider's side.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from primus_runtime.backends.base import ClientOptions


def airflow_client_options(backend: str, fields: Mapping[str, Any], options: ClientOptions) -> ClientOptions:
    """``options`` completed by this package's module for ``backend``, if it has one."""
    try:
        module = importlib.import_module(f"{__name__}.{backend}")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.{backend}":
            raise
        return options
    completed: ClientOptions = module.client_options(fields, options)
    return completed
