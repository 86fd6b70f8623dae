"""Every module of the runtime and of the provider imports in a fresh interpreter, alone and in a few
orders: an import circle (``spec -> backends -> base -> spec`` was one) breaks only when one of its
modules is imported first, which a test suite importing ``primus_runtime`` at its top never does.

One fresh interpreter imports the third-party stacks (Airflow, pydantic, aiohttp), forgets what of
this project they imported (Airflow reads the provider's info), then forks a child per case: each
child starts with none of the project's modules loaded, as a new process would, without paying
Airflow's import each time.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"primus_runtime": ROOT / "runtime" / "primus_runtime",
            "airflow_provider_primus": ROOT / "airflow_provider_primus"}


def modules() -> list[str]:
    """Every module of both packages, by file (importing a package to list it would hide a circle);
    not ``__main__`` (it runs a process's work)."""
    found = []
    for package, path in PACKAGES.items():
        for file in sorted(path.rglob("*.py")):
            parts = file.relative_to(path).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found.append(".".join((package, *parts)))
    return found


_DRIVER = r"""
import importlib, json, os, sys, traceback
for heavy in ("airflow", "airflow.sdk", "pydantic", "aiohttp", "fastapi", "requests"):
    importlib.import_module(heavy)
ours = ("primus_runtime", "airflow_provider_primus")
# Airflow's import reads every provider's info (get_provider_info: the connection form asks the backends'
# catalogue): forgotten here, so that each child imports our modules anew, in its order.
for module in [m for m in sys.modules if m.split(".")[0] in ours]:
    del sys.modules[module]
failures = {}
for name, order in json.loads(sys.stdin.read()).items():
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        message = b""
        for module in order:
            try:
                importlib.import_module(module)
            except BaseException:
                message = f"importing {module} (order {name}):\n{traceback.format_exc()}".encode()
                break
        os.write(write, message)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read()
    _, status = os.waitpid(child, 0)
    if said or status:
        failures[name] = said.decode() or f"exit status {status}"
print(json.dumps({"failures": failures}))
"""


def test_each_module_imports_first_alone_and_in_several_orders():
    everything = modules()
    assert "primus_runtime.spec" in everything and "airflow_provider_primus.hooks.primus" in everything
    shuffled = list(everything)
    random.Random(25).shuffle(shuffled)
    orders = {**{f"{module} alone": [module] for module in everything},
              "sorted": everything, "reversed": everything[::-1], "shuffled": shuffled}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT)]),
           "PYDANTIC_DISABLE_PLUGINS": "__all__"}
    proc = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(orders), capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    failures = report["failures"]
    assert not failures, "\n\n".join(failures.values())
