"""Entry point of the AM process: ``python -m primus_runtime.am JOB_DIR``."""

import gc
import os

# The start-up imports build tens of thousands of objects (pydantic schemas, aiohttp): the cyclic
# collector would scan them again and again (a tenth of the start-up). Off until serve() runs, which
# freezes what the start-up made (it lives as long as the AM) and turns it back on.
gc.disable()

# The AM validates one spec and never needs pydantic plugins; looking them up
# scans every installed distribution's entry points on each AM start.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from .early import listen  # noqa: E402 - standard library only

listen()  # before the AM's stack is imported: executors already connecting wait in the backlog

from .main import main  # noqa: E402

main()
