"""Apache Airflow provider for Primus jobs.

Registered through the ``apache_airflow_provider`` entry point, so ``airflow providers``
lists it: ``airflow providers get airflow-provider-primus``.
"""

from __future__ import annotations

__version__ = "0.1.0"


def _field(label: str, description: str, schema: dict) -> dict:
    return {"label": label, "description": description, "schema": schema}


_TEXT = {"type": ["string", "null"]}


def connection_fields() -> dict[str, dict]:
    """Declarative form fields (Airflow >= 3.2, the floor in pyproject.toml), stored as keys of the
    connection's extra; read by PrimusHook.settings (hooks/primus.py CONNECTION_FIELDS): the backend,
    each backend's own fields (its registry entry's ``connection_fields``), the data checkpoint
    root. The connection holds no secret: the job token lives with each job (local: its job
    directory, mode 0600) and never in Airflow."""
    from primus_runtime import backends  # light: the backends' settings, not their clients

    fields = {
        "backend": _field("Backend", "Where jobs run: " + ", ".join(
            f"{info.name} ({info.summary})" for info in backends.BACKENDS.values()) + ".",
            {"type": "string", "enum": list(backends.NAMES), "default": backends.DEFAULT}),
    }
    for info in backends.BACKENDS.values():
        for field in info.connection_fields:
            fields.setdefault(field.name, _field(field.label, field.description, _TEXT))
    fields["work_preserve_root"] = _field(
        "Data checkpoint root", "Where the submit operator keeps each task instance's data checkpoints, so a "
        "retry resumes the input where the failed try stopped (default <home>/work-preserve; an hdfs:// path on "
        "YARN).", _TEXT)
    return fields


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
            {"integration-name": "Primus", "python-modules": ["airflow_provider_primus.triggers.primus",
                                                              "airflow_provider_primus.triggers.partition_events"]}
        ],
        "extra-links": ["airflow_provider_primus.links.primus.PrimusJobLink"],
        "connection-types": [
            {
                "connection-type": "primus",
                "hook-class-name": "airflow_provider_primus.hooks.primus.PrimusHook",
                "hook-name": "Primus",
                # Declarative form fields (Airflow >= 3.2); stored as keys of the connection's extra.
                "conn-fields": connection_fields(),
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                    "relabeling": {},
                    "placeholders": {"home": "~/.primus", "namespace": "default", "yarn_queue": "default"},
                },
            }
        ],
    }
