#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft: broker and controller in one JVM, loopback only) for
# tests and for trying Kafka input by hand.
#
#   scripts/kafka.sh build             # once per version, needs Maven Central; prints the lib dir
#   scripts/kafka.sh start DIR         # format DIR (first time), start, wait until ready; prints the bootstrap
#   . DIR/env.sh                       # PRIMUS_KAFKA_BOOTSTRAP, PRIMUS_KAFKA_DIR
#   scripts/kafka.sh status DIR        # prints DIR/ready.json; rc 0 only if the broker answers
#   scripts/kafka.sh stop DIR          # SIGTERM (clean shutdown), SIGKILL after 20 s
#
# DIR holds server.properties, the data (data/, kept: stop then start on the same DIR keeps topics,
# records and committed offsets, on the same ports), kafka.log, kafka.pid, ready.json and env.sh.
# Needs Java 17+ and, for build, Maven: jars in ~/.cache/primus-kafka/VERSION/lib (Maven's own
# cache ~/.m2; a warm machine fetches nothing). Readiness is checked with confluent_kafka from the
# project's venv (PRIMUS_KAFKA_PYTHON).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
SRC=$HERE/kafka
CMD=${1:-}
DIR=${2:-}
VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$SRC/pom.xml")
LIB=${PRIMUS_KAFKA_CACHE:-$HOME/.cache/primus-kafka}/$VERSION/lib
PYTHON=${PRIMUS_KAFKA_PYTHON:-$REPO/.venv/bin/python}
START_TIMEOUT=${PRIMUS_KAFKA_TIMEOUT:-90}
STOP_TIMEOUT=${PRIMUS_KAFKA_STOP_TIMEOUT:-20}
HEAP=${PRIMUS_KAFKA_HEAP:-512m}
# C1 only (TieredStopAtLevel=1): measured on 2 busy cores, a fresh start took ~5.5 s instead of
# ~7 s, a restart ~3 s instead of ~5.5 s, and 1M records of 100 B through 4 partitions cost the broker
# less CPU (1.0-1.4 s against 1.5-2.2 s: no C2 compiler threads) at the same or better rates. A
# long heavy benchmark may want C2 back: PRIMUS_KAFKA_JVM_OPTS=-XX:TieredStopAtLevel=4 (the last
# option wins).
COMMON_JVM_OPTS=(-XX:TieredStopAtLevel=1 -XX:-UsePerfData -Djava.awt.headless=true
  -Dlog4j2.configurationFile="$SRC/log4j2.properties")
JVM_OPTS=("${COMMON_JVM_OPTS[@]}" -Xms"$HEAP" -Xmx"$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
  -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError)
# shellcheck disable=SC2206 # word-split on purpose: extra JVM options
JVM_OPTS+=(${PRIMUS_KAFKA_JVM_OPTS:-})

die() { echo "kafka: $*" >&2; exit 1; }

# The pom's hash marks a complete lib dir: a changed pom builds again, a warm one returns at once.
build() {
  local key
  key=$(sha256sum "$SRC/pom.xml" | cut -c1-16)
  [ "$(cat "$LIB/.built" 2>/dev/null)" = "$key" ] && return
  command -v mvn >/dev/null || die "mvn not found (Maven 3 fetches Kafka $VERSION from Maven Central)"
  echo "kafka: copying Kafka $VERSION's jars into $LIB with Maven (the first time downloads ~45 MB)" >&2
  local parent tmp log ok=""
  parent=$(dirname "$LIB")
  mkdir -p "$parent"
  tmp=$(mktemp -d "$parent/build.XXXXXX")
  log=$tmp/mvn.log
  # Offline first: a warm ~/.m2 needs no network.
  for offline in -o ""; do
    if mvn -q -B $offline -f "$SRC/pom.xml" dependency:copy-dependencies -Dkafka.lib.dir="$tmp/lib" >"$log" 2>&1; then
      ok=1
      break
    fi
  done
  [ -n "$ok" ] || { tail -40 "$log" >&2; die "Maven failed (log above, full log in $log)"; }
  echo "$key" >"$tmp/lib/.built"
  rm -rf "$LIB" "$tmp/mvn.log"
  mv "$tmp/lib" "$LIB"
  rmdir "$tmp"
}

need_dir() { [ -n "$DIR" ] || die "usage: $0 $CMD DIR"; }

# The broker of DIR is running: its pid file names a live kafka.Kafka JVM (not some later process
# that got the same pid).
is_running() {
  local pid
  pid=$(cat "$DIR/kafka.pid" 2>/dev/null) || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' kafka.Kafka ' &&
    ! grep -q '^[0-9]* (.*) Z' "/proc/$pid/stat"
}

bootstrap() { sed -n 's/^advertised.listeners=PLAINTEXT:\/\///p' "$DIR/server.properties"; }

# First start on DIR: free ports, the configuration, and storage formatted as a standalone quorum.
# Later starts keep all three.
prepare() {
  [ -f "$DIR/data/meta.properties" ] && return
  local ports broker_port controller_port cluster_id
  ports=$("$PYTHON" "$SRC/probe.py" ports 2) || die "cannot pick ports"
  { read -r broker_port; read -r controller_port; } <<<"$ports"
  rm -rf "$DIR/data"
  sed -e "s|@BROKER_PORT@|$broker_port|g" -e "s|@CONTROLLER_PORT@|$controller_port|g" \
    -e "s|@DATA_DIR@|$DIR/data|g" "$SRC/server.properties" >"$DIR/server.properties"
  cluster_id=$("$PYTHON" "$SRC/probe.py" cluster-id)
  java "${COMMON_JVM_OPTS[@]}" -cp "$LIB/*" kafka.tools.StorageTool \
    format --standalone -t "$cluster_id" -c "$DIR/server.properties" >"$DIR/format.log" 2>&1 ||
    { cat "$DIR/format.log" >&2; die "formatting $DIR/data failed"; }
}

start() {
  need_dir
  command -v java >/dev/null || die "java not found (Java 17+ runs the broker)"
  [ -x "$PYTHON" ] || die "no Python with confluent_kafka at $PYTHON (set PRIMUS_KAFKA_PYTHON)"
  mkdir -p "$DIR"
  DIR=$(cd "$DIR" && pwd)  # server.properties and env.sh hold absolute paths
  if is_running; then
    if [ -f "$DIR/ready.json" ]; then
      echo "kafka: already running in $DIR" >&2
      bootstrap
      return
    fi
    # A start that was interrupted before the broker was ready: a second JVM would find the
    # data dir locked, so end that one first.
    stop
  fi
  local t0=$SECONDS
  build
  rm -f "$DIR/ready.json" "$DIR/env.sh"
  prepare
  local address pid log_from
  address=$(bootstrap)
  touch "$DIR/kafka.log"
  log_from=$(($(wc -l <"$DIR/kafka.log") + 1))  # this run's first line: kafka.log grows across restarts
  # Its own session: a Ctrl-C of the caller does not reach it; stop signals the whole group.
  (exec setsid java "${JVM_OPTS[@]}" -cp "$LIB/*" kafka.Kafka "$DIR/server.properties" \
    >>"$DIR/kafka.log" 2>&1 </dev/null) &
  pid=$!
  echo "$pid" >"$DIR/kafka.pid"
  if ! "$PYTHON" "$SRC/probe.py" wait "$address" "$pid" "$START_TIMEOUT"; then
    log_excerpt "$log_from" >&2
    stop >/dev/null 2>&1 || true
    die "not ready (log: $DIR/kafka.log)"
  fi
  printf '{"bootstrap": "%s", "dir": "%s", "pid": %s, "version": "%s", "log": "%s"}\n' \
    "$address" "$DIR" "$pid" "$VERSION" "$DIR/kafka.log" >"$DIR/ready.json"
  cat >"$DIR/env.sh" <<EOF
# Source this to use the Kafka broker in $DIR (written by scripts/kafka.sh).
export PRIMUS_KAFKA_BOOTSTRAP="$address"
export PRIMUS_KAFKA_DIR="$DIR"
EOF
  echo "kafka: ready in $((SECONDS - t0))s on $address; use it with: . $DIR/env.sh" >&2
  echo "$address"
}

# Why this run of the broker failed, from line FROM of kafka.log: its first errors, each with the
# exception line under it (the log's end is only the shutdown that follows), or else the last lines.
log_excerpt() {
  local run
  run=$(tail -n +"$1" "$DIR/kafka.log")
  if grep -q '\] ERROR ' <<<"$run"; then
    grep -A1 -m3 '\] ERROR ' <<<"$run" | cut -c1-400
  else
    tail -20 <<<"$run"
  fi
}

# SIGTERM is Kafka's controlled shutdown (it marks the logs clean, so the next start does not
# recover them); SIGKILL only when that hangs.
stop() {
  need_dir
  if is_running; then
    local pid i t0=${EPOCHREALTIME/./}
    pid=$(cat "$DIR/kafka.pid")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
      is_running || break
      sleep 0.1
    done
    if is_running; then
      echo "kafka: broker $pid ignored SIGTERM for ${STOP_TIMEOUT}s, killing it" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    echo "kafka: stopped in $(((${EPOCHREALTIME/./} - t0) / 1000)) ms ($DIR)" >&2
  else
    echo "kafka: not running ($DIR)" >&2
  fi
  rm -f "$DIR/kafka.pid" "$DIR/ready.json"
}

status() {
  need_dir
  if ! is_running || [ ! -f "$DIR/ready.json" ]; then
    echo "kafka: not running ($DIR)" >&2
    return 1
  fi
  cat "$DIR/ready.json"
  "$PYTHON" "$SRC/probe.py" answers "$(bootstrap)" || { echo "kafka: running but not answering ($DIR)" >&2; return 1; }
}

case "$CMD" in
  build) build; echo "$LIB" ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 build | start|stop|status DIR" >&2; exit 2 ;;
esac
