"""The ``backend`` section of a job on the local backend."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from ...spec_types import SIZE_RULE, BackendSettings, ByteSize
from .environment import BASE_ENV


class LocalBackend(BackendSettings):
    """Executors are processes on this machine (development, CI, single-node jobs).

    Where jobs are kept (the Primus home) is the client's setting, not the job's:
    ``--home``, ``$PRIMUS_HOME`` or ``~/.primus``, or the Airflow connection's ``home``.
    """

    type: Literal["local"] = "local"
    cpus: float | None = Field(
        None, gt=0, description="CPU capacity of the resource ledger; default 4x this machine's cores "
        "(local runs may oversubscribe)."
    )
    memory: ByteSize | None = Field(None, description="Memory capacity, e.g. '16Gi'; default this machine's "
                                      "RAM. " + SIZE_RULE)
    gpus: list[int] | None = Field(
        None, description="GPU ids to hand out; default the ones in CUDA_VISIBLE_DEVICES, else none."
    )
    inherit_env: list[str] = Field(
        default_factory=list, description="Variables of the submitting environment the executors and their "
        f"trainers get besides {', '.join(BASE_ENV)}: names, or prefixes ending in '*' ('AWS_*'). Nothing else "
        "of it (an Airflow worker's AIRFLOW_* settings, connections and secrets, cloud credentials) reaches "
        "a trainer."
    )

    @field_validator("inherit_env")
    @classmethod
    def _inherit_patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*\*?", pattern):
                raise ValueError(f"{pattern!r} is not a variable name, nor a prefix ending in '*'")
            if pattern.upper().startswith("PRIMUS_"):
                # The executor drops its own PRIMUS_* settings before it starts the trainer.
                raise ValueError(f"{pattern!r}: PRIMUS_* variables are the runtime's own and never reach a "
                                 f"trainer; use another name")
        return value
