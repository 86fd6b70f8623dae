"""Optional packages for an executor started without ``site`` (standard library only, Python 3.9+)."""

from __future__ import annotations

import sys


def with_site_packages() -> None:
    """Put the interpreter's site-packages on ``sys.path``, once: the local backend starts executors
    with ``-S`` (the executor needs only the standard library, and skipping site saves part of the
    start), so a package an input format needs (pyarrow, zstandard, confluent_kafka) is found only
    after this."""
    if not sys.flags.no_site or getattr(with_site_packages, "done", False):
        return
    import site

    site.main()
    with_site_packages.done = True  # type: ignore[attr-defined]
