"""Apache Airflow provider for Primus jobs.

The hooks, operators, sensors, triggers and links arrive with the provider
work; this package already registers itself so `airflow providers` finds it.
"""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-provider-primus",
        "name": "Primus",
        "description": "Submit, watch and control Primus distributed-training jobs on YARN, Kubernetes "
        "or the local machine.",
        "versions": [__version__],
        "hooks": [],
        "operators": [],
        "sensors": [],
        "triggers": [],
        "connection-types": [],
        "extra-links": [],
    }
