"""Primus vs its Hadoop Streaming predecessor: the same text job both ways on this machine.

ByteDance ran training as Hadoop Streaming jobs before Primus (the trainer is the streaming
mapper and reads its input split on stdin). This benchmark runs one job both ways and prints,
last, the ratio of the medians ``streaming_time / primus_time`` (> 1: Primus is faster):

* The job: a text file of RECORDS lines, consumed by ``bench/hadoop_streaming/consumer.py`` (the
  same script, same interpreter, same arguments on both sides): it reads lines on stdin, does
  ROUNDS SHA-256 rounds per record (a fixed CPU cost) and prints ``records<TAB>N`` at EOF. Both
  sides must report exactly RECORDS records (checked: the run fails otherwise).
* (a) Hadoop Streaming: a map-only streaming job (``-numReduceTasks 0``) with MAPS map tasks on
  a MiniMRYarnCluster + MiniDFSCluster (Hadoop 3.5.0 from Maven Central, hadoop-streaming 3.4.2:
  Central has no 3.5.0 of it) in one JVM, driven by ``bench/hadoop_streaming/`` (its pom.xml and
  StreamingBench.java). The input is copied into HDFS once, before any run. Timed: from
  ``StreamJob`` being called (it packages the job jar with consumer.py, uploads it to the staging
  dir, submits) to the job client seeing the job complete, i.e. MR AM container start, split
  computation, one JVM (YarnChild) per map task starting and streaming its split to the mapper,
  output committed to HDFS. Client polls are set to 100 ms (default 5 s) so polling does not
  dominate; RM/NM heartbeats are 250 ms as in scripts/minicluster.sh.
* (b) Primus: ``PrimusClient(home).submit(spec)`` then ``.wait(app_id)``: a ``worker`` role of MAPS
  replicas with ``consumes_input: true`` whose command is the consumer, fed the same file (local
  disk) by the data plane in tasks of ``ceil(size / MAPS)`` bytes (so MAPS tasks, like MAPS splits).
  Timed: from submit (spec validation, AM process start) to wait seeing a final state, i.e. AM
  start, input scan and split, executor processes, trainers, feeding over the executor protocol,
  EOF, exits. AM heartbeat interval 0.25 s (the default is 1 s), client wait poll 0.1 s.
  Untimed: waiting for the AM process to exit before the next run (the Hadoop driver likewise
  waits, untimed, for the MR AM's container to exit).
  Backend: local by default; ``PRIMUS_BENCH_BACKEND=yarn`` puts ``backend: {type: yarn}`` in the
  spec, submitted to the cluster of ``$HADOOP_CONF_DIR`` (``. DIR/env.sh`` after
  ``scripts/minicluster.sh start DIR``: a second Hadoop JVM next to this benchmark's, the driver
  ignores HADOOP_CONF_DIR); without it the client fails with HadoopConfigError, before Hadoop
  starts. On YARN the input source is marked ``node_local``: the minicluster's NodeManager runs on
  this machine, so its executors read the same local file.

So the ratio compares, per job: MapReduce's per-job start-up (job jar packaging and upload, an
MR AM JVM in a YARN container, one task JVM per map, output commit to HDFS) against Primus'
(an AM Python process, one executor Python process per worker, the data plane's scan and feed),
plus the same consumer work on both sides. It does not include: starting the Hadoop clusters
(done once and reported apart, like a cluster that is always there); HDFS vs local reads beyond
what each job does (Primus reads the local file here, streaming reads it from HDFS: the same
disk, HDFS adds a DataNode hop); shuffle, reduce, failures, retries; a real multi-node
cluster; and, with the local backend, YARN on the Primus side at all (its executors are plain
processes, while every MR task goes through a ResourceManager and a NodeManager). Everything
runs on one 2-core machine shared with other work; the idle Hadoop JVM stays up during the
Primus runs. Runs alternate (streaming first in odd rounds, Primus first in even ones) after one
unmeasured warm-up of each; the ratio is of the medians.

Measured on 2026-12-02 (2 shared cores, load average 4-5 from other work, 200000 records,
2 maps / workers, medians): 0 rounds (start-up only) streaming 24.2 s vs Primus local 1.1 s
(22x); 20 rounds (default) 26.7 s vs 5.0 s (5.3x); 200 rounds 52.1 s vs 33.5 s (1.6x). The
consumer work costs about the same on both sides; MapReduce adds a fixed ~20-25 s per job here,
Primus local ~1 s, so the ratio depends on the job's length and tends to 1 for long jobs (3x
near ~10 s of compute). Primus on the YARN backend (scripts/minicluster.sh, PRIMUS_BENCH_BACKEND=yarn,
runs interleaved as above), default job: 14.0 s vs streaming 19.3 s, 1.38x. (An earlier
measurement of the YARN side alone, not interleaved with streaming runs, saw 19-34 s.)

    /work/main/.venv/bin/python bench/hadoop_streaming.py

Env: PRIMUS_BENCH_RECORDS (200000), PRIMUS_BENCH_ROUNDS (20: SHA-256 rounds per record),
PRIMUS_BENCH_MAPS (2), PRIMUS_BENCH_RUNS (3 measured runs each), PRIMUS_BENCH_BACKEND (local),
PRIMUS_BENCH_DIR (work directory; default a fresh temporary one, removed afterwards),
PRIMUS_BENCH_CACHE (~/.cache/primus-streaming-bench: the built driver and its classpath, by
content hash, so a second run needs no network). Needs Java 17 and Maven. Not part of CI.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from primus_runtime.client import PrimusClient

HERE = Path(__file__).resolve().parent
PROJECT = HERE / "hadoop_streaming"
CONSUMER = PROJECT / "consumer.py"

RECORDS = int(os.environ.get("PRIMUS_BENCH_RECORDS", "200000"))
ROUNDS = int(os.environ.get("PRIMUS_BENCH_ROUNDS", "20"))
MAPS = int(os.environ.get("PRIMUS_BENCH_MAPS", "2"))
RUNS = int(os.environ.get("PRIMUS_BENCH_RUNS", "3"))
BACKEND = os.environ.get("PRIMUS_BENCH_BACKEND", "local")
CACHE_ROOT = Path(os.environ.get("PRIMUS_BENCH_CACHE", Path.home() / ".cache" / "primus-streaming-bench"))

# Hadoop on Java 17 reflects into these JDK packages (the list in scripts/minicluster.sh); the
# MR AM and task JVMs need them too.
JAVA_OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.lang", "java.lang.reflect", "java.io", "java.net", "java.nio", "java.util",
    "java.util.concurrent", "sun.nio.ch", "sun.net.dns", "sun.net.util")]


def build() -> tuple[Path, str]:
    """The driver jar and its classpath, built once per content of the Maven project."""
    sources = [PROJECT / "pom.xml", *sorted((PROJECT / "src").rglob("*.*"))]
    key = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    cache = CACHE_ROOT / key
    if not (cache / "launcher.jar").exists() or not (cache / "classpath").exists():
        CACHE_ROOT.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=CACHE_ROOT, prefix="build."))
        log = tmp / "mvn.log"
        print(f"building the Hadoop Streaming driver (log: {log})", file=sys.stderr)
        # Offline first (warm ~/.m2), online when something is missing.
        for offline in (["-o"], []):
            with open(log, "a") as out:
                steps = [["package", "-DskipTests"],
                         ["dependency:build-classpath", f"-Dmdep.outputFile={tmp / 'classpath'}"]]
                if all(subprocess.run(["mvn", "-q", "-B", *offline, "-f", str(PROJECT / "pom.xml"), *step],
                                      stdout=out, stderr=subprocess.STDOUT).returncode == 0 for step in steps):
                    break
        else:
            sys.exit(f"Maven build failed, see {log}:\n" + log.read_text()[-3000:])
        shutil.copy(PROJECT / "target" / "primus-streaming-bench-1.jar", tmp / "launcher.jar")
        shutil.rmtree(cache, ignore_errors=True)
        tmp.rename(cache)
    return cache / "launcher.jar", (cache / "classpath").read_text().strip()


class StreamingCluster:
    """The driver JVM (HDFS + MapReduce on YARN); commands on its stdin, ``BENCH`` lines back."""

    def __init__(self, work: Path):
        jar, classpath = build()
        java = shutil.which("java") or sys.exit("java not found (Java 17 is needed)")
        work.mkdir(parents=True, exist_ok=True)
        self.log = work / "hadoop.log"
        self._log = open(self.log, "wb")
        env = {k: v for k, v in os.environ.items() if k not in ("CLASSPATH", "HADOOP_HOME", "HADOOP_CONF_DIR")}
        # cwd = work: MiniYARNCluster keeps its dirs under ./target.
        self.proc = subprocess.Popen(
            [java, "-Xmx1g", "-XX:+UseSerialGC", *JAVA_OPENS, "-Djava.net.preferIPv4Stack=true",
             "-Dbench.javaOpens=" + " ".join(JAVA_OPENS), "-cp", f"{jar}:{classpath}",
             "primus.bench.StreamingBench", str(work / "cluster")],
            cwd=work, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            text=True, start_new_session=True)
        self.startup = float(self._reply("ready")[0])

    def _reply(self, kind: str) -> list[str]:
        line = self.proc.stdout.readline()
        if not line.startswith("BENCH " + kind + " "):
            tail = self.log.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"Hadoop driver: expected {kind!r}, got {line.strip()!r}; log {self.log}:\n{tail}")
        return line.split()[2:]

    def _send(self, *fields: str) -> None:
        self.proc.stdin.write("\t".join(fields) + "\n")
        self.proc.stdin.flush()

    def put(self, local: Path, hdfs: str) -> None:
        self._send("put", str(local), hdfs)
        self._reply("put")

    def run(self, hdfs_input: str, command: str, files: list[Path]) -> tuple[float, int, int]:
        """Wall seconds of one streaming job, its map tasks and the records its mappers consumed."""
        self._send("run", hdfs_input, str(MAPS), command, ",".join(map(str, files)))
        seconds, maps, records, _lines = self._reply("run")
        return float(seconds), int(maps), int(records)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # EOF: the driver stops both clusters
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        # The NodeManager kills its containers on stop; anything left runs in our session.
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self._log.close()


def write_input(path: Path) -> int:
    """RECORDS text lines of ~64 bytes (like a small feature row); the file's size."""
    pad = "x" * 48
    with open(path, "w") as f:
        for i in range(RECORDS):
            f.write(f"{i:09d}\t{pad}\t{i % 97:02d}\n")
    return path.stat().st_size


def primus_spec(data: Path, size: int) -> dict[str, Any]:
    backend: dict[str, Any] = {"type": BACKEND}
    return {
        "name": "streaming-bench",
        "am": {"heartbeat_interval": 0.25, "heartbeat_timeout": 5.0, "shutdown_grace": 2.0},
        "backend": backend,
        "roles": [{"name": "worker", "replicas": MAPS, "consumes_input": True,
                   "command": f"{sys.executable} consumer.py {ROUNDS}", "files": [str(CONSUMER)]}],
        "input": {"sources": [{"name": "bench", "path": str(data.parent), "pattern": data.name,
                               "success_marker": None, "format": "text", "node_local": BACKEND != "local"}],
                  # MAPS tasks, as the streaming job gets MAPS splits.
                  "task_size": f"{math.ceil(size / MAPS)}B"},
    }


def run_primus(client: PrimusClient, spec: dict[str, Any]) -> tuple[float, int]:
    """Wall seconds of one Primus job and the records its trainers consumed."""
    start = time.monotonic()
    app = client.submit(spec)
    status = client.wait(app, poll=0.1)
    seconds = time.monotonic() - start
    if BACKEND == "local":
        # The AM may still be shutting down: let it exit (untimed) before the next run, as the
        # Hadoop driver waits for the MR AM to exit.
        deadline = time.monotonic() + 30
        while client.cluster("local").am_pid(app) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
    if status.job.state != "succeeded":
        raise RuntimeError(f"Primus job {app}: {status.job.model_dump(mode='json')}; AM log {client.log_path(app)}")
    records = 0
    for index in range(MAPS):
        # follow_log reads the log wherever the backend keeps it (local file, NodeManager).
        log = b"".join(client.follow_log(app, client.log_path(app, "worker", index))).decode()
        for line in log.splitlines():
            if line.startswith("records\t"):
                records += int(line.split("\t")[1])
    return seconds, records


def main() -> None:
    keep = "PRIMUS_BENCH_DIR" in os.environ
    work = Path(os.environ["PRIMUS_BENCH_DIR"]) if keep else Path(tempfile.mkdtemp(prefix="streaming-bench."))
    data = work / "data" / "input.txt"
    data.parent.mkdir(parents=True, exist_ok=True)
    size = write_input(data)
    print(f"input: {RECORDS} records, {size / 2**20:.1f} MiB; {ROUNDS} SHA-256 rounds per record; "
          f"{MAPS} map tasks / workers; {RUNS} measured runs each; Primus backend {BACKEND}", flush=True)
    client = PrimusClient(work / "primus-home")
    spec = primus_spec(data, size)
    command = f"{sys.executable} consumer.py {ROUNDS}"
    times: dict[str, list[float]] = {"streaming": [], "primus": []}
    cluster: StreamingCluster | None = None

    def once(kind: str, label: str) -> None:
        if kind == "streaming":
            seconds, maps, records = cluster.run("/in/input.txt", command, [CONSUMER])
            detail = f"{maps} maps"
        else:
            seconds, records = run_primus(client, spec)
            detail = f"{MAPS} workers"
        if records != RECORDS:
            raise RuntimeError(f"{kind} consumed {records} records, expected {RECORDS}")
        print(f"{label:7s} {kind:9s} {seconds:7.2f} s  ({detail}, {records} records)", flush=True)
        if label != "warm-up":
            times[kind].append(seconds)

    try:
        # Primus' warm-up first: a backend that is not available fails before Hadoop starts.
        once("primus", "warm-up")
        cluster = StreamingCluster(work)
        print(f"hadoop: HDFS + MapReduce on YARN up in {cluster.startup:.1f} s (not counted)", flush=True)
        cluster.put(data, "/in/input.txt")
        once("streaming", "warm-up")
        for i in range(RUNS):
            # Alternate who goes first, so that drift on the shared machine hits both alike.
            order = ("streaming", "primus") if i % 2 == 0 else ("primus", "streaming")
            for kind in order:
                once(kind, f"run {i + 1}")
    finally:
        if cluster is not None:
            cluster.close()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    streaming, primus = statistics.median(times["streaming"]), statistics.median(times["primus"])
    print(f"Primus ({BACKEND}) against Hadoop Streaming, medians: streaming {streaming:.2f} s, "
          f"primus {primus:.2f} s: {streaming / primus:.2f}x")


if __name__ == "__main__":
    main()
