"""The job bundle: the runtime package as one zip, named by its content hash.

Backends ship this single file to every node (the local backend runs it in
place, YARN and Kubernetes localize it), so an executor needs nothing but a
Python interpreter: ``python primus-runtime-<hash>.zip executor``.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent

_MAIN = b'''import sys

if sys.argv[1:2] != ["executor"]:
    sys.exit("usage: python primus-runtime.zip executor")
from primus_runtime.executor.main import main

sys.exit(main())
'''


def _sources() -> list[tuple[str, bytes]]:
    files = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        files.append((str(Path("primus_runtime") / path.relative_to(PACKAGE_DIR)), path.read_bytes()))
    return files


def build_bundle(cache_dir: Path) -> Path:
    """The bundle for this runtime, built once per content hash into ``cache_dir``."""
    files = _sources()
    digest = hashlib.sha256(_MAIN)
    for name, data in files:
        digest.update(name.encode() + b"\0" + data + b"\0")
    target = cache_dir / f"primus-runtime-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__main__.py", _MAIN)
        for name, data in files:
            zf.writestr(name, data)
    os.replace(tmp, target)  # atomic: concurrent submits never see half a zip
    return target
