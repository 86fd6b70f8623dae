"""Apache Airflow provider for Primus jobs.

Registered through the ``apache_airflow_provider`` entry point, so ``airflow providers``
lists it: ``airflow providers get airflow-provider-primus``.
"""

from __future__ import annotations

__version__ = "0.1.0"


def _field(label: str, description: str, schema: dict) -> dict:
    return {"label": label, "description": description, "schema": schema}


_TEXT = {"type": ["string", "null"]}
# Declarative form fields (Airflow >= 3.2, the floor in pyproject.toml), stored as keys of the connection's extra; read by
# PrimusHook.settings (hooks/primus.py CONNECTION_FIELDS). The connection holds no secret: the
# job token lives with each job (local: its job directory, mode 0600) and never in Airflow.
_CONNECTION_FIELDS = {
    "backend": _field("Backend", "Where jobs run: local (this machine), yarn or kubernetes.",
                      {"type": "string", "enum": ["local", "yarn", "kubernetes"], "default": "local"}),
    "home": _field("Local job home", "local: the Primus home holding one directory per job "
                   "(default $PRIMUS_HOME, else ~/.primus).", _TEXT),
    "work_preserve_root": _field("Data checkpoint root", "Where the submit operator keeps each task "
                                 "instance's data checkpoints, so a retry resumes the input where the failed "
                                 "try stopped (default <home>/work-preserve; an hdfs:// path on YARN).", _TEXT),
    "yarn_queue": _field("YARN queue", "yarn: the queue jobs are submitted to (a job spec's backend.queue "
                         "wins).", _TEXT),
    "hadoop_conf_dir": _field("Hadoop configuration", "yarn: directory of the cluster's client configuration "
                              "(core-site.xml, hdfs-site.xml, yarn-site.xml; default $HADOOP_CONF_DIR).", _TEXT),
    "yarn_principal": _field("Kerberos principal", "yarn, on a Kerberized cluster: the principal jobs are "
                             "submitted and read as (a job spec's backend.principal wins).", _TEXT),
    "yarn_keytab": _field("Kerberos keytab", "yarn: the principal's keytab on the Airflow workers; every REST "
                          "call authenticates with SPNEGO from it (a private credential cache).", _TEXT),
    "kubernetes_conn_id": _field("Kubernetes connection", "kubernetes: the cncf-kubernetes provider's "
                                 "connection to reach the cluster with (default kubernetes_default).", _TEXT),
    "namespace": _field("Kubernetes namespace", "kubernetes: namespace of the AM and executor pods (a job "
                        "spec's backend.namespace wins; default the Kubernetes connection's, else default).", _TEXT),
    "image": _field("Runtime image", "kubernetes: the image the AM and executors run when a job spec's backend "
                    "names none (built FROM the Primus runtime image, see docker/).", _TEXT),
}


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
                "conn-fields": _CONNECTION_FIELDS,
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                    "relabeling": {},
                    "placeholders": {"home": "~/.primus", "namespace": "default", "yarn_queue": "default"},
                },
            }
        ],
    }
