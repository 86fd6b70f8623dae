"""Preemption notices: how an executor learns that its node is going away (standard library only).

A notice is SIGTERM (what YARN's NodeManager and the kubelet send before they kill a container),
the role's extra ``preemption.signal``, the role's ``preemption.notice_file`` appearing (written by a
node termination handler or a spot-instance agent; checked every heartbeat), or the AM's drain
command. On any of them the executor drains (``Executor._drain`` in ``main.py``). SIGTERM is a
notice (when the AM itself stops an executor it also sends it a kill command, and the AM then
records the end as stopped whatever the executor exits with) except where the backend says it is
not (``PRIMUS_SIGTERM_IS_NOTICE=0``, YARN: the NodeManager sends SIGTERM for every kill, its memory
limits included, with SIGKILL 250 ms later, and the container's exit status tells a preemption).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from .. import protocol


class PreemptionSettings:
    """The role's ``preemption`` section, as the backend passes it in the executor's environment."""

    def __init__(self, env: dict[str, str], default_grace: float):
        self.notice_file = env.get(protocol.ENV_PREEMPTION_NOTICE_FILE) or None
        name = env.get(protocol.ENV_PREEMPTION_SIGNAL)
        self.signal = signal.Signals[name] if name else None  # a name the spec validated
        self.grace = float(env.get(protocol.ENV_PREEMPTION_GRACE) or default_grace)
        self.sigterm = env.get(protocol.ENV_SIGTERM_IS_NOTICE, "1") != "0"

    def notice(self) -> str | None:
        """Why the node is going away, if its notice file says so."""
        if self.notice_file is not None and os.path.exists(self.notice_file):
            return f"preemption notice {self.notice_file} appeared"
        return None


def listen_for_notice_signals(settings: PreemptionSettings, on_notice: Callable[[str], None]) -> None:
    """Call ``on_notice(why)`` on SIGTERM (where it is a notice) and the role's extra signal (from the
    signal handler: it must only set flags and send signals)."""

    def handler(signum: int, frame: Any) -> None:
        on_notice(f"received {signal.Signals(signum).name}")

    if settings.sigterm:
        signal.signal(signal.SIGTERM, handler)
    if settings.signal is not None:
        signal.signal(settings.signal, handler)
