"""What ships to cluster nodes: no Airflow anywhere in the runtime, and an
executor that needs nothing but the standard library of Python 3.9+."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile
from pathlib import Path

from primus_runtime.bundle import build_bundle

RUNTIME = Path(__file__).resolve().parents[1] / "runtime" / "primus_runtime"
# Modules the executor process loads (its package and the runtime modules it imports).
EXECUTOR_MODULES = [*sorted((RUNTIME / "executor").glob("*.py")), RUNTIME / "protocol.py",
                    RUNTIME / "api_client.py", RUNTIME / "__init__.py", RUNTIME / "data" / "__init__.py",
                    RUNTIME / "data" / "formats.py", RUNTIME / "data" / "reader.py"]
# Imported inside the functions that read those formats only, never at import time.
OPTIONAL_IMPORTS = {"formats.py": {"pyarrow", "zstandard", "compression"}, "reader.py": {"torch"}}


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


def test_bundle_is_reused_for_the_same_content(tmp_path):
    assert build_bundle(tmp_path) == build_bundle(tmp_path)
    assert len(list(tmp_path.glob("*.zip"))) == 1
