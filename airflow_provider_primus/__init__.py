"""Apache Airflow provider for Primus jobs.

Registered through the ``apache_airflow_provider`` entry point, so ``airflow providers``
lists it. The data-progress and partition sensors and extra links arrive next.
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
        "integrations": [
            {"integration-name": "Primus", "external-doc-url": "https://github.com/bytedance/primus",
             "tags": ["software"]},
        ],
        "hooks": [{"integration-name": "Primus", "python-modules": ["airflow_provider_primus.hooks.primus"]}],
        "operators": [
            {"integration-name": "Primus", "python-modules": ["airflow_provider_primus.operators.primus"]}
        ],
        "sensors": [
            {"integration-name": "Primus", "python-modules": ["airflow_provider_primus.sensors.primus"]}
        ],
        "triggers": [
            {"integration-name": "Primus", "python-modules": ["airflow_provider_primus.triggers.primus"]}
        ],
        "extra-links": [],
        "connection-types": [
            {
                "connection-type": "primus",
                "hook-class-name": "airflow_provider_primus.hooks.primus.PrimusHook",
                "hook-name": "Primus",
                # Declarative form fields (Airflow >= 3.2); stored as keys of the connection's extra.
                "conn-fields": {
                    "backend": {
                        "label": "Backend",
                        "description": "Where jobs run. Only 'local' is available in this version.",
                        "schema": {"type": "string", "enum": ["local", "yarn", "kubernetes"],
                                   "default": "local"},
                    },
                    "home": {
                        "label": "Local job home",
                        "description": "local backend: the Primus home holding one directory per job "
                        "(default $PRIMUS_HOME, else ~/.primus).",
                        "schema": {"type": ["string", "null"]},
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                    "relabeling": {},
                    "placeholders": {"home": "~/.primus"},
                },
            }
        ],
    }
