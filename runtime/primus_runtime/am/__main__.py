"""Entry point of the AM process: ``python -m primus_runtime.am --backend NAME [ARGS]``.

The arguments after the backend's name are its bootstrap's (``backends/<name>/am.py``): ``main.py``
parses them. This module only prepares the process (collector off, an early listen, the local
backend's supervisor fork) before the AM's stack is imported."""

import gc
import os

# The start-up imports build tens of thousands of objects (pydantic schemas, aiohttp): the cyclic
# collector would scan them again and again (a tenth of the start-up). Off until serve() runs, which
# freezes what the start-up made (it lives as long as the AM) and turns it back on.
gc.disable()

# The AM validates one spec and never needs pydantic plugins; looking them up
# scans every installed distribution's entry points on each AM start.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

if "PRIMUS_AM_SUPERVISOR" in os.environ:  # protocol.ENV_AM_SUPERVISOR: a backend's AM supervisor
    # The parent of a fork becomes the AM's supervisor (the module the backend's client names, e.g.
    # backends/local/supervisor.py with am.max_attempts > 1), the child runs on as AM attempt 1. Loaded
    # by path: importing the package ``backends`` would import the spec's stack.
    import importlib.util
    import json

    _path = json.loads(os.environ["PRIMUS_AM_SUPERVISOR"])["module"]
    _spec = importlib.util.spec_from_file_location("primus_local_supervisor", _path)
    assert _spec is not None and _spec.loader is not None
    _supervisor = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_supervisor)
    _supervisor.supervise_this_process()

from .early import listen  # noqa: E402 - standard library only

listen()  # before the AM's stack is imported: executors already connecting wait in the backlog

from .main import main  # noqa: E402

main()
