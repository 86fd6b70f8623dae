"""The chaos tests drive bench/chaos.py's scenarios and bench/netfault.py's proxy. bench/chaos.py
is imported as ``chaos_bench``: ``chaos`` is this test package's own name."""

from __future__ import annotations

from conftest import chaos_bench

chaos_bench()
