"""The ``backend`` section of a job on the local backend."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ...spec_types import SIZE_RULE, BackendSettings, ByteSize


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
