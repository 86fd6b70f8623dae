"""The ``backend`` section of a job on Kubernetes."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ...spec_types import SIZE_RULE, BackendSettings, ByteSize, Seconds

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
_TOLERATION_OPERATORS = ("Exists", "Equal")
_TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class KubernetesBackend(BackendSettings):
    """One AM pod plus one pod per executor, in ``namespace``. The AM pod runs ``image`` (the
    runtime image, ``docker/runtime.Dockerfile``, or one built from it with the trainer's
    framework); executor pods run the same image."""

    type: Literal["kubernetes"]
    namespace: str = Field("default", description="Namespace of every object of the job (it must exist).")
    image: str | None = Field(
        None, description="Image of the AM and executor pods: the Primus runtime image or one FROM it. "
        "Required at submit: here, or the Airflow connection's image for a spec that leaves it out.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None, description="Pull policy of every container; default Kubernetes' (Always for :latest).")
    service_account: str | None = Field(
        None, description="Service account of the executor pods (the AM gets its own, with just the rights "
        "it needs); default the namespace's `default`.")
    image_pull_secrets: list[str] = Field(default_factory=list, description="Secrets to pull the image with.")
    node_selector: dict[str, str] = Field(default_factory=dict, description="nodeSelector of every pod.")
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="Tolerations of every pod (keys: key, operator, value, effect, "
        "tolerationSeconds).")
    scheduler_name: str | None = Field(None, description="schedulerName of every pod (e.g. volcano).")
    gang: Literal["none", "volcano", "kueue"] = Field(
        "none", description="Gang scheduling of the executor pods: none; volcano (a PodGroup of all executors, "
        "needs Volcano); kueue (the pods carry a LocalQueue's name, needs Kueue with pod integration).")
    queue: str | None = Field(None, description="The Volcano queue or Kueue LocalQueue; required by gang: kueue.")
    am_cpu: float = Field(0.5, gt=0, description="CPU of the AM pod (request and limit).")
    am_memory: ByteSize = Field("512Mi", validate_default=True,
                                description="Memory of the AM pod (request and limit). " + SIZE_RULE)
    labels: dict[str, str] = Field(default_factory=dict, description="Extra labels of every pod.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra annotations of every pod.")
    termination_grace: Seconds | None = Field(
        None, description="terminationGracePeriodSeconds of executor pods; default the job's "
        "am.shutdown_grace plus 5 seconds (the executor forwards SIGTERM and waits that long).")

    @field_validator("namespace")
    @classmethod
    def _namespace_is_a_dns_label(cls, value: str) -> str:
        if not DNS_LABEL.match(value):
            raise ValueError(f"must be a DNS label (lowercase letters, digits, '-', at most 63), got {value!r}")
        return value

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, toleration in enumerate(value):
            unknown = sorted(set(toleration) - _TOLERATION_KEYS)
            if unknown:
                raise ValueError(f"[{i}]: unknown keys {unknown} (allowed: {sorted(_TOLERATION_KEYS)})")
            if toleration.get("operator", "Equal") not in _TOLERATION_OPERATORS:
                raise ValueError(f"[{i}].operator: must be one of {list(_TOLERATION_OPERATORS)}, "
                                 f"got {toleration['operator']!r}")
            if "effect" in toleration and toleration["effect"] not in _TOLERATION_EFFECTS:
                raise ValueError(f"[{i}].effect: must be one of {list(_TOLERATION_EFFECTS)}, "
                                 f"got {toleration['effect']!r}")
        return value

    @model_validator(mode="after")
    def _queue_for_kueue(self) -> KubernetesBackend:
        if self.gang == "kueue" and not self.queue:
            raise ValueError("queue: gang: kueue needs the LocalQueue's name, got none")
        return self

    def submit_problems(self) -> list[str]:
        return [] if self.image else [
            "backend.image: is required: the image of the AM and executor pods (the spec's backend.image, "
            "or the Airflow connection's image)"]
