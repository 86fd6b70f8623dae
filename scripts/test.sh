#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/install-hdfs-provider.sh
scripts/install-framework.sh

# The Hadoop minicluster (YARN + HDFS, one JVM; Java 17 and Maven) for tests/cluster: started
# in the background while the linters run, stopped on exit. Its directory (minicluster.log,
# container logs) is kept when a test fails. PRIMUS_NO_MINICLUSTER=1 leaves it out (tests/cluster
# then start their own).
minicluster_pid=""
if [ -z "${PRIMUS_NO_MINICLUSTER:-}" ]; then
  MINICLUSTER_DIR=$(mktemp -d /tmp/primus-minicluster.XXXXXX)
  scripts/minicluster.sh start "$MINICLUSTER_DIR" &
  minicluster_pid=$!
  # On an early exit (a linter failed) the start may still be running: end it first.
  trap 'kill "$minicluster_pid" 2>/dev/null || true; wait "$minicluster_pid" 2>/dev/null || true
        scripts/minicluster.sh stop "$MINICLUSTER_DIR" 2>/dev/null || true' EXIT
fi

.venv/bin/ruff check runtime airflow_provider_primus tests examples bench example_dags
.venv/bin/mypy
export PRIMUS_HOME="${PRIMUS_HOME:-$(mktemp -d /tmp/primus-test-home.XXXXXX)}"

if [ -n "$minicluster_pid" ]; then
  wait "$minicluster_pid"
  # HADOOP_CONF_DIR, PATH with its bin/yarn (for skein), JAVA_HOME, PRIMUS_MINICLUSTER_DIR.
  # shellcheck disable=SC1091
  . "$MINICLUSTER_DIR/env.sh"
fi
rc=0
.venv/bin/python -m pytest -q -ra "$@" || rc=$?
if [ -n "$minicluster_pid" ]; then
  scripts/minicluster.sh stop "$MINICLUSTER_DIR"
  trap - EXIT
  if [ "$rc" = 0 ]; then
    rm -rf "$MINICLUSTER_DIR"
  else
    echo "test: minicluster logs kept in $MINICLUSTER_DIR (minicluster.log, target/)" >&2
  fi
fi
exit "$rc"
