"""Primus triggers.

The triggerer imports a trigger's module, and whatever that module imports, on its event loop
(``TriggerRunner.create_triggers``), where every other trigger waits meanwhile. The provider's
trigger modules therefore import only what is light at the top; the rest (aiohttp, the runtime's
client, its pydantic spec: over half a second on a loaded machine) is imported in a worker thread
by ``import_off_loop`` when a trigger first runs.
"""

from __future__ import annotations

import asyncio
import importlib
import sys


async def import_off_loop(*modules: str) -> None:
    """Import ``modules`` in a worker thread, unless they are loaded already (then at no cost)."""
    missing = [name for name in modules if name not in sys.modules]
    if missing:
        await asyncio.to_thread(lambda: [importlib.import_module(name) for name in missing])
