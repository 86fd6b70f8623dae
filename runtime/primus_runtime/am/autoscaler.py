"""Backlog autoscaling of a consuming role (``Role.autoscale``): a pure policy.

The AM asks ``Autoscaler.decide()`` every ``interval`` while the job runs, with the role's size and
the input's ``Backlog`` (``DataPlane.backlog()``), and carries out a ``Decision`` through its own
scaling path (``request_scale``). The policy never sees executors, tasks or clocks of its own: time
comes in as ``now`` (``time.monotonic()``), so every rule is testable alone.

Rules (see ``spec.Autoscale``): the target gives the replicas wanted, clamped to the bounds; a change
is made at most once per cooldown, counted from the last change and from the first evaluation. Up at
once; down only once every evaluation of a whole cooldown wanted fewer (then to the most any of them
wanted), so that a backlog that dips between two bursts does not make the role flap; or at once when
a file input is finishing (every partition listed and the backlog falling: nothing can refill it).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Literal

from ..spec import Autoscale


@dataclass(frozen=True)
class Backlog:
    """What is left to read of the input, and how fast it goes."""

    kind: Literal["kafka", "files"]
    amount: int  # kafka: records of consumer lag; files: bytes of listed tasks not read yet
    rate: float  # the same unit per second, read by every consumer over the last ``window`` seconds
    complete: bool  # files: every partition is listed (the backlog can only shrink); kafka: always False
    window: float  # seconds the rate was measured over


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str  # for people: the backlog, the target and the change


class Autoscaler:
    def __init__(self, role: str, policy: Autoscale):
        self.role = role
        self.policy = policy
        self._started: float | None = None  # the first evaluation: the job runs from then on
        self._changed_at: float | None = None  # the last decision
        self._below_since: float | None = None  # every evaluation since wanted fewer replicas
        self._below_most = 0  # the most any of those wanted
        self._last_amount: int | None = None
        self._sizes: deque[tuple[float, int]] = deque()  # (since when, replicas): the rate's window

    def decide(self, now: float, replicas: int, backlog: Backlog) -> Decision | None:
        """The change to make now, if any. ``now``: time.monotonic(); ``replicas``: the role's size."""
        if self._started is None:
            self._started = now
        self._note_size(now, replicas, backlog.window)
        finishing = backlog.kind == "files" and backlog.complete and self._last_amount is not None \
            and backlog.amount <= self._last_amount
        self._last_amount = backlog.amount
        wanted = self._wanted(now, replicas, backlog)
        if wanted is None:  # the target does not apply, or there is no rate to judge by yet
            self._below_since = None
            return None
        desired = min(max(wanted, self.policy.min_replicas), self.policy.max_replicas)
        if desired < replicas:
            if self._below_since is None:
                self._below_since, self._below_most = now, desired
            self._below_most = max(self._below_most, desired)
        else:
            self._below_since = None
        if desired == replicas or now - (self._changed_at or self._started) < self.policy.cooldown:
            return None
        if desired > replicas:
            return self._decided(now, replicas, desired, wanted, backlog, "")
        assert self._below_since is not None
        held = now - self._below_since
        if finishing:
            return self._decided(now, replicas, desired, wanted, backlog, ", the input finishing (every partition listed)")
        if held >= self.policy.cooldown:
            return self._decided(now, replicas, self._below_most, wanted, backlog, f" for {held:.0f}s")
        return None

    def pause(self) -> None:
        """Not evaluated for a while (the job is not running, the input is suspended): what was seen is
        stale and the rate will hold the pause, so the next evaluation starts afresh, a cooldown ahead."""
        self._started = self._changed_at = self._below_since = self._last_amount = None

    # --- the target -------------------------------------------------------------------------------

    def _wanted(self, now: float, replicas: int, backlog: Backlog) -> int | None:
        """Replicas the target asks for (unclamped); None when it cannot say."""
        policy = self.policy
        if policy.target_lag is not None:
            return math.ceil(backlog.amount / policy.target_lag) if backlog.kind == "kafka" else None
        if policy.target_queued is not None:
            return math.ceil(backlog.amount / policy.target_queued) if backlog.kind == "files" else None
        if backlog.amount == 0:
            return 0
        per_replica = self._per_replica_rate(now, replicas, backlog)
        if per_replica <= 0:
            return None  # nothing read yet (the first moments, or the consumers are stuck): wait
        assert policy.target_catchup is not None
        return math.ceil(backlog.amount / (per_replica * policy.target_catchup))

    def _per_replica_rate(self, now: float, replicas: int, backlog: Backlog) -> float:
        # Over the rate's window, not at this instant: right after a change the window still holds
        # seconds read by the old number of replicas.
        return backlog.rate / max(self._mean_size(now, backlog.window), 1e-9) if replicas else 0.0

    def _note_size(self, now: float, replicas: int, window: float) -> None:
        if not self._sizes or self._sizes[-1][1] != replicas:
            self._sizes.append((now, replicas))
        while len(self._sizes) > 1 and self._sizes[1][0] <= now - window:
            self._sizes.popleft()  # it ended before the window began

    def _mean_size(self, now: float, window: float) -> float:
        """The role's size over the last ``window`` seconds (as far back as this autoscaler saw it)."""
        start = max(now - window, self._sizes[0][0])
        if now <= start:
            return float(self._sizes[-1][1])
        ends = [since for since, _ in list(self._sizes)[1:]] + [now]
        spans = zip(self._sizes, ends, strict=True)
        covered = sum(size * (end - max(since, start)) for (since, size), end in spans if end > start)
        return covered / (now - start)

    # --- the decision -----------------------------------------------------------------------------

    def _decided(self, now: float, old: int, new: int, wanted: int, backlog: Backlog, held: str) -> Decision:
        self._changed_at, self._below_since = now, None
        self._sizes.append((now, new))  # from now on, as far as the rate per replica is concerned
        return Decision(new, f"{self._load(now, old, new, backlog, held)}: {old} -> {new}{self._bounds(new, wanted)}")

    def _load(self, now: float, old: int, new: int, backlog: Backlog, held: str) -> str:
        """The backlog against the target, as it justifies going from ``old`` to ``new`` replicas."""
        policy = self.policy
        amount = _amount(backlog)
        up = new > old
        if backlog.amount == 0:
            return f"no backlog{held}"
        per_target = policy.target_lag if policy.target_lag is not None else policy.target_queued
        if per_target is not None:
            target = f"{per_target:,}" if backlog.kind == "kafka" else _size(per_target)
            return f"backlog {amount} {'>' if up else '<='} {old if up else new} x {target} per replica{held}"
        per_replica = self._per_replica_rate(now, old, backlog)
        size = old if up else new
        drain = backlog.amount / (per_replica * size)
        return (f"backlog {amount} drains in {drain:,.0f}s at {size} x {_rate(backlog, per_replica)} "
                f"{'>' if up else '<='} {policy.target_catchup:g}s{held}")

    def _bounds(self, new: int, wanted: int) -> str:
        low, high = self.policy.min_replicas, self.policy.max_replicas
        if new == high:
            return f" (wants {wanted}, max {high})" if wanted > high else f" (max {high})"
        return f" (min {low})" if new == low and wanted < low else ""


def _amount(backlog: Backlog) -> str:
    return f"{backlog.amount:,} records of lag" if backlog.kind == "kafka" else f"{_size(backlog.amount)} queued"


def _rate(backlog: Backlog, per_replica: float) -> str:
    return f"{per_replica:,.0f} records/s" if backlog.kind == "kafka" else f"{_size(per_replica)}/s"


def _size(value: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"
