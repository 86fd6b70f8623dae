"""A copy of the AM journal where the next AM attempt, started on another node, finds it.

The journal itself (``journal.py``) is a local file beside the status file. On the local backend the
next attempt runs in the same job directory; on Kubernetes and YARN it starts in a new pod or
container, so each attempt keeps a compacted copy (one line per object) in the backend's store (a
ConfigMap, the job's HDFS directory) and the next one downloads it before it takes over.

What a new attempt can miss is the last upload interval's changes: an executor that registered in it
is found unregistered in the copy, one launched in it is unknown to the copy (the backend then stops
it and a replacement starts); tasks handed out in it are handed out again from the input's
work-preserve snapshots (at least once; exactly-once through the checkpoints saved with them).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from . import journal

if TYPE_CHECKING:
    from .master import ApplicationMaster

log = logging.getLogger("primus.am")

FIRST_COPY_POLL = 0.2  # seconds


class JournalCopy(Protocol):
    """Where an attempt keeps its journal's copy."""

    name: str  # for messages: the ConfigMap, the HDFS path

    async def download(self) -> str | None:
        """The copy an earlier attempt uploaded: None when none did, "" when it outgrew the store."""

    async def upload(self, text: str) -> bool:
        """Replace the copy with ``text``; False when it is more than the store keeps (the copy is
        then emptied, so that no later attempt takes over from an outdated one)."""


async def download(copy: JournalCopy, path: Path) -> journal.Recovered | None:
    """The earlier attempts' journal, written to ``path`` (where this attempt's journal goes on)."""
    text = await copy.download()
    if not text:
        log.warning("no AM journal to take over from (%s): the job starts afresh",
                    "it outgrew its store" if text == "" else f"none in {copy.name}")
        return None
    path.write_text(text, encoding="utf-8")
    return journal.load(path)


async def keep_uploaded(am: ApplicationMaster, copy: JournalCopy, interval: float) -> None:
    """Replace the copy with the compacted journal when it changed, at once and then at most every
    ``interval`` seconds; stop for good (the job cannot be taken over past this point) once it outgrows
    the store. The first copy goes up at once: an AM that dies in its first seconds still leaves its
    job to the next attempt (executors it launched then are found gone, not forgotten)."""
    assert am.journal is not None
    written: tuple[int, int] | None = None
    while True:
        # Until the first copy is up, looked at every FIRST_COPY_POLL: the journal appears with the
        # AM's first step.
        await asyncio.sleep(interval if written is not None else FIRST_COPY_POLL)
        if not am.journal.path.exists():
            continue
        stat = am.journal.path.stat()
        if (stat.st_size, stat.st_mtime_ns) == written:
            continue
        text, _ = am.journal.compacted()
        try:
            fits = await copy.upload(text)
        except Exception:  # noqa: BLE001 - the store may be briefly unavailable: the next round retries
            log.exception("uploading the AM journal to %s failed", copy.name)
            continue
        written = (stat.st_size, stat.st_mtime_ns)
        if not fits:
            warning = (f"the AM journal ({len(text.encode())} bytes) outgrew {copy.name}: a new AM attempt "
                       f"cannot take over this job any more, it would start every executor again")
            log.warning("%s", warning)
            am.record.add_event("am", None, "warning", warning)
            return
