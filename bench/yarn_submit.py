"""YARN: submit -> every executor's trainer running, for a Primus job of 1 AM + N executors, against
a bare skein application that starts the same N containers with the same command.

Both sides start from nothing in the same process: a skein Java driver is started for each submit
on both sides (``skein.Client``), the same container size is asked for, and "running" means the
same thing: the trainer command has started (it touches a marker file first; the containers run on
this machine's NodeManager). The Primus side adds what a Primus job needs and skein does not do: its
bundle is checked on HDFS (uploaded once per content hash, so not in the timed runs after the
warm-up), the spec is validated, the AM (Python, in skein's master container) asks for each
executor container, executors register and are told to start their trainers.

Needs the minicluster: uses PRIMUS_MINICLUSTER_DIR when it names a running one, else starts one
(scripts/minicluster.sh) and stops it at the end. Runs RUNS rounds (default 3) after one warm-up
round, each round a Primus run then a skein run; the last line is the ratio of the medians, Primus
median / skein median (goal: at most 1.3), as every benchmark here reports its figure.

    python bench/yarn_submit.py            # EXECUTORS=4 RUNS=3
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import clear  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EXECUTORS = int(os.environ.get("EXECUTORS", 4))
RUNS = int(os.environ.get("RUNS", 3))
MEMORY_MIB, VCORES = 256, 1


def marker_command(marker_dir: Path) -> list[str]:
    """Touch a marker named after the container (Primus: the incarnation; skein: its container id)."""
    code = ("import os, time\n"
            "name = os.environ.get('PRIMUS_INCARNATION') or os.environ['SKEIN_CONTAINER_ID']\n"
            f"open(os.path.join({str(marker_dir)!r}, name), 'w').close()\n"
            "time.sleep(600)\n")
    return [sys.executable, "-c", code]


def wait_markers(marker_dir: Path) -> float:
    deadline = time.monotonic() + 180
    while len(list(marker_dir.iterdir())) < EXECUTORS:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(list(marker_dir.iterdir()))} of {EXECUTORS} containers ran")
        time.sleep(0.01)
    return time.monotonic()


def primus_run(marker_dir: Path, home: Path) -> float:
    from primus_runtime.client import PrimusClient

    client = PrimusClient(home)
    spec = {"name": "bench-yarn-submit", "backend": {"type": "yarn", "am_memory": "512Mi"},
            "roles": [{"name": "worker", "replicas": EXECUTORS, "command": marker_command(marker_dir),
                       "resources": {"cpu": VCORES, "memory": f"{MEMORY_MIB}Mi"}}]}
    start = time.monotonic()
    app_id = client.submit(spec)
    done = wait_markers(marker_dir)
    client.cluster("yarn").force_kill(app_id)
    return done - start


def skein_run(marker_dir: Path) -> float:
    import shlex

    import skein

    service = skein.Service(resources=skein.Resources(memory=MEMORY_MIB, vcores=VCORES), instances=EXECUTORS,
                            script=" ".join(shlex.quote(a) for a in marker_command(marker_dir)))
    spec = skein.ApplicationSpec(name="bench-bare-skein", services={"worker": service},
                                 master=skein.Master(resources=skein.Resources(memory=512, vcores=1)))
    start = time.monotonic()
    with skein.Client(log=False) as client:
        app_id = client.submit(spec)
        done = wait_markers(marker_dir)
        client.kill_application(app_id)
    return done - start


def _cluster() -> tuple[str, bool]:
    """The minicluster directory, and whether this run started it."""
    given = os.environ.get("PRIMUS_MINICLUSTER_DIR")
    script = REPO / "scripts" / "minicluster.sh"
    if given and subprocess.run([str(script), "status", given], capture_output=True).returncode == 0:
        return given, False
    directory = tempfile.mkdtemp(prefix="primus-bench-mc-")
    subprocess.run([str(script), "start", directory], check=True)
    return directory, True


def _use(directory: str) -> None:
    out = subprocess.run(["bash", "-c", f". {directory}/env.sh && env -0"], capture_output=True, check=True)
    os.environ.update(dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item))


def main() -> None:
    directory, owned = _cluster()
    _use(directory)
    try:
        with tempfile.TemporaryDirectory(prefix="primus-bench-yarn-") as tmp:
            marker_dir, home = Path(tmp) / "markers", Path(tmp) / "home"
            marker_dir.mkdir()
            times: dict[str, list[float]] = {"primus": [], "skein": []}
            for round_ in range(RUNS + 1):  # round 0 warms up (bundle upload, JIT of the cluster)
                for name, run in (("primus", lambda: primus_run(marker_dir, home)),
                                  ("skein", lambda: skein_run(marker_dir))):
                    clear(marker_dir)
                    took = run()
                    print(f"round {round_}{' (warm-up)' if round_ == 0 else ''}: {name:6} {took:.2f} s", flush=True)
                    if round_:
                        times[name].append(took)
                    time.sleep(2)  # let YARN release the containers before the next run
    finally:
        if owned:
            subprocess.run([str(REPO / "scripts" / "minicluster.sh"), "stop", directory], check=False)
    print(json.dumps({"executors": EXECUTORS, "primus_s": times["primus"], "skein_s": times["skein"]}))
    primus, bare = statistics.median(times["primus"]), statistics.median(times["skein"])
    print(f"Primus submit -> {EXECUTORS} executors running {primus:.2f} s, bare skein {bare:.2f} s "
          f"(medians; goal <= 1.3x): {primus / bare:.2f}x")


if __name__ == "__main__":
    main()
