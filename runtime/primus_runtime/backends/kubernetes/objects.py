"""The parts of the API's objects the AM reads, as typed models of the API's JSON (camelCase
names, unknown fields ignored): what ``api.KubeApi`` returns is validated into these at the
boundary, the rest of the backend reads attributes, as it did of the ``kubernetes`` package's
models."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class KubeModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class OwnerReference(KubeModel):
    kind: str
    name: str
    uid: str


class ObjectMeta(KubeModel):
    name: str = ""
    namespace: str | None = None
    uid: str = ""
    resource_version: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list)
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None


class ContainerStateTerminated(KubeModel):
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    finished_at: datetime | None = None


class ContainerStateWaiting(KubeModel):
    reason: str | None = None
    message: str | None = None


class ContainerState(KubeModel):
    terminated: ContainerStateTerminated | None = None
    waiting: ContainerStateWaiting | None = None
    running: dict[str, Any] | None = None


class ContainerStatus(KubeModel):
    name: str
    state: ContainerState | None = None
    ready: bool = False


class PodCondition(KubeModel):
    type: str
    status: str
    reason: str | None = None
    message: str | None = None


class PodSpec(KubeModel):
    node_name: str | None = None


class PodStatus(KubeModel):
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    pod_ip: str | None = Field(None, alias="podIP")
    conditions: list[PodCondition] = Field(default_factory=list)
    container_statuses: list[ContainerStatus] = Field(default_factory=list)


class Pod(KubeModel):
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodSpec = Field(default_factory=PodSpec)
    status: PodStatus = Field(default_factory=PodStatus)


def pod_of(obj: dict[str, Any]) -> Pod:
    """A pod as the API server sent it (JSON), typed."""
    return Pod.model_validate(obj)
