"""The ``backend`` section of a job on Kubernetes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...spec_types import BackendSettings


class KubernetesBackend(BackendSettings):
    """One AM pod plus executor pods (implemented by the Kubernetes backend)."""

    type: Literal["kubernetes"]
    namespace: str = "default"
    image: str
    service_account: str | None = None
    image_pull_secrets: list[str] = Field(default_factory=list)
