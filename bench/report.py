"""Every benchmark, one after another, and docs/performance.md from their figures:
``scripts/bench.sh [--clusters] [NAME ...]`` (this script, from the project's venv).

Each benchmark prints its figure as its last line, against a baseline measured in the same run;
this script runs it, keeps that line and writes the table: figure, command, result, goal, and the
machine and date it ran on. The benchmarks that need a cluster (HDFS and YARN: the minicluster;
Kubernetes; Kafka) run with ``--clusters``, each when its cluster's environment is set (the
``env.sh`` that ``scripts/minicluster.sh``, ``scripts/k8s-cluster.sh`` and ``scripts/kafka.sh``
write); the others are listed as not run. NAMEs run only those and leave the other rows as they were.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DOC = BENCH.parent / "docs" / "performance.md"
NOTES = "<!-- notes: kept as they are by bench/report.py -->"


@dataclass
class Benchmark:
    name: str
    script: str
    figure: str
    goal: str
    env: dict[str, str] = field(default_factory=dict)
    cluster: str | None = None  # the environment variable its cluster sets

    @property
    def command(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"{env + ' ' if env else ''}python bench/{self.script}"


BENCHMARKS = [
    Benchmark("heartbeat", "heartbeat.py", "heartbeat capacity vs bare aiohttp (1,000 executors)", ">= 0.9x"),
    Benchmark("scale", "scale.py", "10,000 executors, 1M tasks: start, heartbeat p99, RSS, loss detection",
              "started <= 5 s after the last registration, p99 <= 50 ms, RSS <= 2 GiB, silent lost within "
              "timeout + interval, none healthy lost"),
    Benchmark("startup", "startup.py", "submit -> 8 executors running, local, vs bare subprocess", "<= 3x"),
    Benchmark("recovery", "recovery.py", "executor killed -> replacement running, vs bare subprocess", "<= 2x"),
    Benchmark("dispatch", "dispatch.py", "task dispatch with the journals vs without (1,000 executors, 1M tasks)",
              ">= 0.95x"),
    Benchmark("formats", "formats.py", "TFRecord read vs length-delimited", ">= 0.8x"),
    Benchmark("feed", "feed.py", "framed feed into a pipe vs a plain Python line loop", "-"),
    Benchmark("feed_executor", "feed_executor.py", "the executor's feed vs cat FILE into the same consumer (text, raw)", "-",
              {"SIZE_MB": "256"}),
    Benchmark("trainer_kills", "trainer_kills.py", "records fed again per trainer kill (plain stdin reader)",
              "<= 8 KiB per kill, 0 lost"),
    Benchmark("ui_load", "ui_load.py", "the page at 10,000 executors: executors and tasks shown", "<= 1 s",
              {"EXECUTORS": "10000", "TASKS": "100000", "SECONDS": "5"}),
    Benchmark("am_recovery", "am_recovery.py", "AM killed -> every executor adopted", "-"),
    Benchmark("feed_hdfs", "feed_hdfs.py", "HDFS feed vs a plain WebHDFS client", ">= 0.9x",
              cluster="PRIMUS_MINICLUSTER_DIR"),
    Benchmark("yarn_submit", "yarn_submit.py", "YARN submit -> running vs a bare skein application", "-",
              cluster="PRIMUS_MINICLUSTER_DIR"),
    Benchmark("k8s_submit", "k8s_submit.py", "Kubernetes submit -> running vs direct pods; pod deleted -> "
              "replacement", "<= 2x; <= 1.5x", cluster="KUBECONFIG"),
    Benchmark("kafka", "kafka.py", "Kafka records/s into trainers vs a bare consumer loop", "-",
              cluster="PRIMUS_KAFKA_BOOTSTRAP"),
]


def run(bench: Benchmark) -> tuple[str, float]:
    """The benchmark's last line (or why it failed) and the seconds it took."""
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, bench.script], cwd=BENCH, capture_output=True, text=True,
                              timeout=1800, env={**os.environ, **bench.env})
    except subprocess.TimeoutExpired:
        return "timed out after 30 min", time.monotonic() - started
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed (exit {proc.returncode}): {tail[:300]}", time.monotonic() - started
    return lines[-1], time.monotonic() - started


def previous_rows() -> dict[str, str]:
    """The rows of the last report, by benchmark name (kept for benchmarks not run this time)."""
    if not DOC.exists():
        return {}
    rows = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"\| `([a-z_0-9]+)` \|", line)
        if match:
            rows[match.group(1)] = line
    return rows


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    memory = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    return f"{os.cpu_count()} cores ({cpu}), {memory / 2**20:.0f} GiB, Python {platform.python_version()}"


def main(argv: list[str]) -> int:
    clusters = "--clusters" in argv
    wanted = [a for a in argv if not a.startswith("--")]
    unknown = [name for name in wanted if name not in {b.name for b in BENCHMARKS}]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}: {', '.join(b.name for b in BENCHMARKS)}")
    rows = previous_rows()
    today = dt.date.today().isoformat()
    for bench in BENCHMARKS:
        if wanted and bench.name not in wanted:
            continue
        if bench.cluster is not None and (not clusters or not os.environ.get(bench.cluster)):
            why = "needs --clusters" if not clusters else f"needs its cluster (${bench.cluster})"
            rows.setdefault(bench.name, f"| `{bench.name}` | {bench.figure} | `{bench.command}` | not run: {why} | "
                                        f"{bench.goal} | - |")
            continue
        print(f"== {bench.name}: {bench.command}", flush=True)
        result, seconds = run(bench)
        print(f"   {result}  ({seconds:.0f} s)", flush=True)
        rows[bench.name] = (f"| `{bench.name}` | {bench.figure} | `{bench.command}` | {result.replace('|', '/')} | "
                            f"{bench.goal} | {today} |")
    order = [b.name for b in BENCHMARKS]
    notes = DOC.read_text().split(NOTES, 1)[1] if DOC.exists() and NOTES in DOC.read_text() else "\n"
    DOC.write_text("\n".join([
        "# Performance",
        "",
        "Written by `scripts/bench.sh` (`bench/report.py`): each benchmark's last line, a figure measured "
        "against a baseline in the same run (these machines are small and shared: ratios, not absolute "
        "times, are what compares from run to run). Re-run one with `scripts/bench.sh NAME`; the cluster "
        "ones with `--clusters` inside their clusters' environment.",
        "",
        f"Machine of the last run: {machine()}.",
        "",
        "| benchmark | figure | command | result (its last line) | goal | date |",
        "| --- | --- | --- | --- | --- | --- |",
        *(rows[name] for name in order if name in rows),
        "",
        NOTES,
    ]) + notes)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
