"""The job bundle: the runtime package as one zip, named by its content hash.

Backends ship this single file to every node (the local backend runs it in
place, YARN and Kubernetes localize it), so an executor needs nothing but a
Python interpreter: ``python primus-runtime-<hash>.zip executor``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import marshal
import os
import sys
import zipfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent

_MAIN = b'''import sys

if sys.argv[1:2] == ["executor"]:
    from primus_runtime.executor.main import main
elif sys.argv[1:2] == ["forkserver"]:
    from primus_runtime.executor.forkserver import serve as main
else:
    sys.exit("usage: python primus-runtime.zip executor|forkserver")
sys.exit(main())
'''


# Files besides the modules: the web page the AM serves (read through importlib.resources, which
# works from the zip as well).
_DATA = ("ui/static/*",)


def _sources() -> list[tuple[str, bytes]]:
    paths = sorted(PACKAGE_DIR.rglob("*.py")) + sorted(p for pattern in _DATA for p in PACKAGE_DIR.glob(pattern))
    return [(str(Path("primus_runtime") / path.relative_to(PACKAGE_DIR)), path.read_bytes()) for path in paths]


def _pyc(source: bytes, name: str) -> bytes:
    """Bytecode for this interpreter, as an unchecked-hash .pyc.

    zipimport cannot cache compiled modules, so without these every executor
    would compile the runtime again at start. An interpreter of another
    version sees a foreign magic number, skips the .pyc and uses the .py.
    """
    code = compile(source, name, "exec", dont_inherit=True)
    flags = (0b01).to_bytes(4, "little")  # hash-based, not checked against the source
    source_hash = importlib.util.source_hash(source)
    return importlib.util.MAGIC_NUMBER + flags + source_hash + marshal.dumps(code)


def _digest(files: list[tuple[str, bytes]], start: bytes = b"") -> str:
    digest = hashlib.sha256(start)
    for name, data in files:
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def runtime_digest() -> str:
    """A hash of this runtime's sources: two installations with the same one run the same code
    (whatever their Python), e.g. a client and the image its AM runs. Read once per process (every
    Kubernetes submit sends it; hashing the sources takes tens of milliseconds)."""
    return _digest(_sources())[:16]


def build_bundle(cache_dir: Path) -> Path:
    """The bundle for this runtime, built once per content hash into ``cache_dir``."""
    files = _sources()
    target = cache_dir / f"primus-runtime-{_digest(files, _MAIN + sys.version.encode())[:16]}.zip"
    if target.exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__main__.py", _MAIN)
        for name, data in files:
            zf.writestr(name, data)
            if name.endswith(".py"):
                zf.writestr(name + "c", _pyc(data, name))
    os.replace(tmp, target)  # atomic: concurrent submits never see half a zip
    return target
