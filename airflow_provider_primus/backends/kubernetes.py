"""How an Airflow ``primus`` connection reaches Kubernetes: through the cncf-kubernetes provider's hook."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from primus_runtime.backends.base import ClientOptions


def client_options(fields: Mapping[str, Any], options: ClientOptions) -> ClientOptions:
    """Kubernetes is reached through the cncf-kubernetes provider's ``KubernetesHook`` of the
    connection's ``kubernetes_conn_id`` (in-cluster, kubeconfig, context: whatever that connection
    says); the namespace is the Primus connection's, else the Kubernetes connection's, else ``default``.
    ``ImportError`` (saying what to install) without that provider."""
    try:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
    except ImportError as exc:
        raise ImportError("the kubernetes backend needs apache-airflow-providers-cncf-kubernetes (pip install "
                          "'airflow-provider-primus[kubernetes]')") from exc
    kube = KubernetesHook(conn_id=fields.get("kubernetes_conn_id") or KubernetesHook.default_conn_name)
    return replace(options, kube_api_client=kube.api_client,
                   namespace=options.namespace or kube.get_namespace() or "default")
