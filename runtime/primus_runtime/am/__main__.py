"""Entry point of the AM process: ``python -m primus_runtime.am JOB_DIR``."""

import os

# The AM validates one spec and never needs pydantic plugins; looking them up
# scans every installed distribution's entry points on each AM start.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from .early import listen  # noqa: E402 - standard library only

listen()  # before the AM's stack is imported: executors already connecting wait in the backlog

from .main import main  # noqa: E402

main()
