"""Which Airflow this is: the one place the provider asks, for every feature that depends on it.

The shape of the official providers' ``version_compat.py`` (copied, not imported from another
provider, as they ask): code writes ``if AIRFLOW_V_3_3_PLUS:`` instead of probing for attributes
or catching ``ImportError``, so every version gate can be found with one grep and dropped once the
floor in pyproject.toml passes it. Tests skip with ``requires_airflow`` (tests/provider/conftest.py)
on the same constants.

What each version brings that the provider uses (the floor is in pyproject.toml, with its reason):

- 3.2: the Task SDK's own ``airflow.sdk.configuration`` / ``airflow.sdk.exceptions``,
  declarative connection form fields (``conn-fields`` in the provider info);
- 3.3: the task state store (``context["task_state_store"]``: the reattach key), the asset state
  store (``BaseEventTrigger.asset_state_store``: the partition watcher's position), ``on_kill`` of a
  deferred task's trigger, ``ResumableJobMixin``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def get_base_airflow_version_tuple() -> tuple[int, int, int]:
    """The installed Airflow's release, pre-release and local parts dropped (3.3.0rc1 -> (3, 3, 0))."""
    from airflow import __version__
    from packaging.version import Version

    airflow_version = Version(__version__)
    return airflow_version.major, airflow_version.minor, airflow_version.micro


AIRFLOW_V_3_1_PLUS = get_base_airflow_version_tuple() >= (3, 1, 0)
AIRFLOW_V_3_2_PLUS = get_base_airflow_version_tuple() >= (3, 2, 0)
AIRFLOW_V_3_3_PLUS = get_base_airflow_version_tuple() >= (3, 3, 0)
AIRFLOW_V_3_4_PLUS = get_base_airflow_version_tuple() >= (3, 4, 0)



def task_state_store(context: Mapping[str, Any]) -> Any | None:
    """The task instance's task state store (``TaskStateStoreAccessor``); None before Airflow 3.3."""
    return context.get("task_state_store") if AIRFLOW_V_3_3_PLUS else None


__all__ = [
    "task_state_store",
    "AIRFLOW_V_3_1_PLUS",
    "AIRFLOW_V_3_2_PLUS",
    "AIRFLOW_V_3_3_PLUS",
    "AIRFLOW_V_3_4_PLUS",
    "get_base_airflow_version_tuple",
]
