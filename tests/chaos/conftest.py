"""The chaos tests drive bench/chaos.py's scenarios and bench/netfault.py's proxy. bench/chaos.py
is imported as ``chaos_bench``: ``chaos`` is this test package's own name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
if "chaos_bench" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("chaos_bench", BENCH / "chaos.py")
    assert _spec is not None and _spec.loader is not None
    sys.modules["chaos_bench"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["chaos_bench"])
