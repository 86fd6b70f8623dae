"""What is known of each backend without running it: its spec section and static facts.

A leaf: it imports each backend's ``settings`` (which need only ``spec_types``) and nothing of the
job spec, the clients or the AM, so the spec (which builds its ``backend`` union from ``SETTINGS``
and checks ``serves_tls``) imports it without a circle. The registry (``backends/__init__.py``)
adds what runs: a backend's client, its AM, how Airflow reaches it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..spec_types import BackendSettings
from .kubernetes.settings import KubernetesBackend
from .local.settings import LocalBackend
from .yarn.settings import YarnBackend


@dataclass(frozen=True)
class ConnectionField:
    """A field of an Airflow ``primus`` connection (a key of its extra) that one backend reads."""

    name: str
    label: str  # the connection form's
    description: str
    #: The field of the backend's spec section it fills when a spec leaves that out.
    spec_field: str | None = None
    #: The ``ClientOptions`` field it sets (``backends.base``).
    client_option: str | None = None


@dataclass(frozen=True)
class BackendFacts:
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
    #: The fields of an Airflow connection it reads, in the form's order.
    connection_fields: tuple[ConnectionField, ...] = ()


def _is_local(app_id: str) -> bool:
    return app_id.startswith("primus-")


def _is_yarn(app_id: str) -> bool:
    return app_id.startswith("application_")


def _is_kubernetes(app_id: str) -> bool:
    return app_id.startswith("k8s.")


CATALOGUE: tuple[BackendFacts, ...] = (
    BackendFacts(
        "local", LocalBackend, _is_local, "processes on this machine", shares_files_with_client=True,
        serves_tls=True, adopts_executors=True,
        connection_fields=(
            ConnectionField("home", "Local job home", "local: the Primus home holding one directory per job "
                            "(default $PRIMUS_HOME, else ~/.primus).", client_option="home"),
        )),
    # A new YARN application attempt starts every executor again (skein keeps no container
    # across attempts): a restart costs the trainers' state, so it is the user's choice.
    BackendFacts(
        "yarn", YarnBackend, _is_yarn, "a YARN application through skein", serves_tls=True,
        connection_fields=(
            ConnectionField("hadoop_conf_dir", "Hadoop configuration", "yarn: directory of the cluster's client "
                            "configuration (core-site.xml, hdfs-site.xml, yarn-site.xml; default $HADOOP_CONF_DIR).",
                            client_option="hadoop_conf_dir"),
            ConnectionField("yarn_queue", "YARN queue", "yarn: the queue jobs are submitted to (a job spec's "
                            "backend.queue wins).", spec_field="queue"),
            ConnectionField("yarn_principal", "Kerberos principal", "yarn, on a Kerberized cluster: the principal "
                            "jobs are submitted and read as (a job spec's backend.principal wins).",
                            spec_field="principal", client_option="kerberos_principal"),
            ConnectionField("yarn_keytab", "Kerberos keytab", "yarn: the principal's keytab on the Airflow workers; "
                            "every REST call authenticates with SPNEGO from it (a private credential cache).",
                            spec_field="keytab", client_option="kerberos_keytab"),
        )),
    BackendFacts(
        "kubernetes", KubernetesBackend, _is_kubernetes, "an AM pod and executor pods", adopts_executors=True,
        connection_fields=(
            ConnectionField("kubernetes_conn_id", "Kubernetes connection", "kubernetes: the cncf-kubernetes "
                            "provider's connection to reach the cluster with (default kubernetes_default)."),
            ConnectionField("namespace", "Kubernetes namespace", "kubernetes: namespace of the AM and executor pods "
                            "(a job spec's backend.namespace wins; default the Kubernetes connection's, else "
                            "default).", spec_field="namespace", client_option="namespace"),
            ConnectionField("image", "Runtime image", "kubernetes: the image the AM and executors run when a job "
                            "spec's backend names none (built FROM the Primus runtime image, see docker/).",
                            spec_field="image"),
        )),
)

NAMES = tuple(facts.name for facts in CATALOGUE)
#: The backend used where nothing names one (the CLI's ``--backend``, a connection without one).
DEFAULT = NAMES[0]
# AM attempts when the spec does not say, on a backend that adopts executors (1 on the others).
DEFAULT_AM_ATTEMPTS = 3
SETTINGS = tuple(facts.settings for facts in CATALOGUE)


class UnknownBackend(LookupError):
    pass


def facts(name: str) -> BackendFacts:
    for entry in CATALOGUE:
        if entry.name == name:
            return entry
    raise UnknownBackend(f"backend must be one of {list(NAMES)}, got {name!r}")
