"""Where a client keeps what it makes (the Primus home) and how it writes a secret there: shared by
the backends' clients (local jobs live in the home; YARN caches its bundles there)."""

from __future__ import annotations

import os
from pathlib import Path


def default_home(configured: str | None = None) -> Path:
    """The Primus home: ``configured``, else ``$PRIMUS_HOME``, else ``~/.primus``."""
    return Path(configured or os.environ.get("PRIMUS_HOME") or Path.home() / ".primus").expanduser()


def write_private(path: Path, text: str) -> None:
    """A new file only its owner can read (the mode is set at creation, never wider)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
