"""AM deaths counted toward ``am.max_attempts`` within ``am.attempt_failures_validity_interval``.

Standard library only: the local backend's supervisor (which restarts the AM) and the Kubernetes AM
bootstrap (whose Job restarts it) both count with it, and say the same when the attempts are used up.
"""

from __future__ import annotations


def counted(deaths: list[float], now: float, window: float | None) -> int:
    """How many of the AM deaths (epoch seconds) count now: those within ``window`` (None: all)."""
    return sum(1 for t in deaths if window is None or now - t <= window)


def used_up(deaths: list[float], now: float, max_attempts: int, window: float | None) -> bool:
    return counted(deaths, now, window) >= max_attempts


def used_up_reason(deaths: list[float], now: float, max_attempts: int, window: float | None, last: str) -> str:
    """``the AM died 3 times within 1h (am.max_attempts 3); the last: AM attempt 3 killed by signal 9``."""
    n = counted(deaths, now, window)
    within = " since the job started" if window is None else f" within {format_seconds(window)}"
    return f"the AM died {n} time{'s' if n != 1 else ''}{within} (am.max_attempts {max_attempts}); the last: {last}"


def format_seconds(seconds: float) -> str:
    """``1h``, ``90min``, ``45s``: a duration as a person writes it in a spec."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
