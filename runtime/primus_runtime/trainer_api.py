"""What a trainer tells Primus from inside (standard library only, like ``data.reader``).

A role with ``readiness: {probe: file}`` is ready once its trainer says so: an ordered start
launches the next role only then. Call ``ready()`` once the trainer can serve (its port is
bound, its model loaded)::

    from primus_runtime.trainer_api import ready

    server.listen()
    ready()

A trainer in another language creates the file named by ``$PRIMUS_READY_FILE`` instead.
"""

from __future__ import annotations

import os

READY_FILE_ENV = "PRIMUS_READY_FILE"


def ready() -> None:
    """Tell Primus this trainer is ready. Does nothing unless the role's readiness probe is
    ``file`` (only then is ``PRIMUS_READY_FILE`` set), so the same trainer runs under any probe."""
    path = os.environ.get(READY_FILE_ENV)
    if path:
        with open(path, "a"):
            pass
