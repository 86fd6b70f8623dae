"""What ships to cluster nodes: no Airflow anywhere in the runtime, and an
executor that needs nothing but the standard library of Python 3.9+."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from primus_runtime.bundle import _MAIN, build_bundle

RUNTIME = Path(__file__).resolve().parents[1] / "runtime" / "primus_runtime"
# Imported inside the functions that need them only, never at import time: by the formats that
# read them (parquet, zstd; google_crc32c: TFRecord's CRCs, when installed), (fsspec) by the AM's and clients' WebHDFS
# filesystem, never by the executor, and (confluent_kafka) by an executor handed a Kafka task.
OPTIONAL_IMPORTS = {"parquet.py": {"pyarrow"}, "decompression.py": {"zstandard", "compression"},
                    "crc32c.py": {"google_crc32c"}, "reader.py": {"torch"}, "hadoop.py": {"fsspec"},
                    "kafka_reader.py": {"confluent_kafka"}}


def _module_file(name: str) -> Path | None:
    """The file of a primus_runtime module (``primus_runtime.data.webhdfs``), None for others."""
    parts = name.split(".")
    if parts[0] != "primus_runtime":
        return None
    base = RUNTIME.joinpath(*parts[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(RUNTIME.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, tree: ast.AST) -> set[str]:
    """Every primus_runtime module ``tree`` may import, at import time or inside a function."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from . import protocol`
    return {name for name in found if _module_file(name) is not None}


def executor_modules() -> list[Path]:
    """What runs on a cluster node: everything the bundle's entry point (bundle._MAIN: the executor
    and its fork server) and the trainers' data.reader import, followed transitively, with the
    packages they live in."""
    roots = _runtime_imports(RUNTIME / "__main__.py", ast.parse(_MAIN)) | {"primus_runtime.data.reader",
                                                                          "primus_runtime.executor.__main__"}
    seen: set[str] = set()
    todo = sorted(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = _module_file(name)
        assert path is not None, name
        todo += sorted(_runtime_imports(path, ast.parse(path.read_text())) - seen)
        todo += [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]  # its packages
    return sorted({p for name in seen if (p := _module_file(name)) is not None})


EXECUTOR_MODULES = executor_modules()


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_runtime_never_imports_airflow_or_the_provider():
    for path in RUNTIME.rglob("*.py"):
        bad = _imports(path) & {"airflow", "airflow_provider_primus"}
        assert not bad, f"{path} imports {bad}"


def test_executor_imports_only_the_standard_library():
    for path in EXECUTOR_MODULES:
        third_party = _imports(path) - set(sys.stdlib_module_names) - {"__future__"}
        third_party -= OPTIONAL_IMPORTS.get(path.name, set())
        assert not third_party, f"{path.name} imports {third_party}"


def test_optional_imports_happen_only_inside_functions():
    for path in EXECUTOR_MODULES:
        optional = OPTIONAL_IMPORTS.get(path.name, set())
        top_level = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                top_level.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                top_level.add(node.module.split(".")[0])
        assert not top_level & optional, f"{path.name} imports {top_level & optional} at import time"


def test_executor_parses_as_python_3_9():
    for path in EXECUTOR_MODULES:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))


def test_executor_runs_from_the_bundle_without_third_party_packages(tmp_path):
    bundle = build_bundle(tmp_path)
    assert "__main__.py" in zipfile.ZipFile(bundle).namelist()
    # Block every third-party import the AM uses; the executor must not notice.
    code = (
        "import sys\n"
        "for name in ('pydantic', 'aiohttp', 'yaml', 'uvloop'): sys.modules[name] = None\n"
        f"sys.path.insert(0, {str(bundle)!r})\n"
        "import primus_runtime.executor.main\n"
        "sys.argv = ['x', 'executor']\n"
        "primus_runtime.executor.main.main()\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=30, env={})
    # It got as far as reading its configuration, which the backend provides.
    assert "PRIMUS_AM_ADDRESS is not set" in proc.stderr, proc.stderr


def test_the_executor_module_list_holds_every_runtime_module_the_executor_loads():
    # The import graph above is read from the source; what an executor process really loads must be
    # part of it, or a module would escape the checks.
    code = ("import sys\n"
            f"sys.path.insert(0, {str(RUNTIME.parent)!r})\n"
            "import primus_runtime.executor.main, primus_runtime.executor.forkserver, primus_runtime.data.reader\n"
            "print('\\n'.join(m.__file__ for n, m in sys.modules.items() if n.startswith('primus_runtime')))\n")
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=30,
                          env={}, check=True)
    loaded = {Path(line).resolve() for line in proc.stdout.split()}
    assert loaded and loaded <= set(EXECUTOR_MODULES), loaded - set(EXECUTOR_MODULES)


def test_bundle_is_reused_for_the_same_content(tmp_path):
    assert build_bundle(tmp_path) == build_bundle(tmp_path)
    assert len(list(tmp_path.glob("*.zip"))) == 1
