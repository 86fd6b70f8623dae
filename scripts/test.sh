#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# Phase 1, with the network: everything that downloads (PyPI, Maven Central, the Go module proxy).
# The cluster builds are cached (~/.m2 and ~/.cache/primus-minicluster, ~/.cache/primus-k8s and
# Go's caches, ~/.cache/primus-kafka): a warm machine rebuilds nothing. Then the script runs again
# (phase 2) inside a private network namespace with only `lo` (scripts/in-netns.sh), where the
# Kubernetes test cluster's node agent puts its pod IPs: nothing of it reaches the machine's own
# network.
if [ -z "${PRIMUS_TEST_IN_NETNS:-}" ]; then
  scripts/bootstrap.sh
  scripts/install-hdfs-provider.sh
  scripts/install-browser.sh
  scripts/install-framework.sh
  # One build for both modes: the launcher's classpath has hadoop-minikdc, for the Kerberized
  # minicluster tests/cluster/test_kerberos.py starts (--kerberos) in its own directory.
  [ -n "${PRIMUS_NO_MINICLUSTER:-}" ] || scripts/minicluster.sh build >/dev/null
  [ -n "${PRIMUS_NO_K8S:-}" ] || scripts/k8s-cluster.sh build >/dev/null
  [ -n "${PRIMUS_NO_KAFKA:-}" ] || scripts/kafka.sh build >/dev/null
  # The second venv, with the oldest Airflow supported (cached: a warm run installs nothing).
  [ -n "${PRIMUS_NO_OLDEST_AIRFLOW:-}" ] || scripts/test-oldest-airflow.sh install
  PRIMUS_TEST_IN_NETNS=1 exec scripts/in-netns.sh scripts/test.sh "$@"
fi

# Phase 2. The clusters start in the background while the linters run and are stopped on exit;
# their directories (logs) are kept when a test fails.
# - the Hadoop minicluster (YARN + HDFS, one JVM) for tests/cluster; PRIMUS_NO_MINICLUSTER=1 leaves
#   it out (tests/cluster then start their own);
# - the Kubernetes test cluster (etcd, kube-apiserver, kube-controller-manager and the node agent,
#   a kubelet stand-in) for tests/k8s; PRIMUS_NO_K8S=1 leaves it out (tests/k8s then start their own);
# - a Kafka broker (KRaft, one JVM) for tests/kafka; PRIMUS_NO_KAFKA=1 leaves it out (tests/kafka then
#   start their own).
clusters=()  # "SCRIPT DIR PID" of each cluster started, PID of its start command
started=""   # set once every start command has finished
start_cluster() {  # SCRIPT DIR
  "$1" start "$2" &
  clusters+=("$1 $2 $!")
}
stop_clusters() {  # on an early exit (a linter failed) a start may still be running: end it first
  local c script dir pid
  for c in "${clusters[@]}"; do
    read -r script dir pid <<<"$c"
    if [ -z "$started" ]; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
    "$script" stop "$dir" 2>/dev/null || true
  done
}
trap stop_clusters EXIT
if [ -z "${PRIMUS_NO_MINICLUSTER:-}" ]; then
  MINICLUSTER_DIR=$(mktemp -d /tmp/primus-minicluster.XXXXXX)
  start_cluster scripts/minicluster.sh "$MINICLUSTER_DIR"
fi
if [ -z "${PRIMUS_NO_K8S:-}" ]; then
  K8S_DIR=$(mktemp -d /tmp/primus-k8s.XXXXXX)
  start_cluster scripts/k8s-cluster.sh "$K8S_DIR"
fi
if [ -z "${PRIMUS_NO_KAFKA:-}" ]; then
  KAFKA_DIR=$(mktemp -d /tmp/primus-kafka.XXXXXX)
  start_cluster scripts/kafka.sh "$KAFKA_DIR"
fi

.venv/bin/ruff check runtime airflow_provider_primus tests examples bench example_dags scripts/k8s scripts/kafka
.venv/bin/mypy
.venv/bin/hadolint docker/runtime.Dockerfile
export PRIMUS_HOME="${PRIMUS_HOME:-$(mktemp -d /tmp/primus-test-home.XXXXXX)}"

for c in "${clusters[@]}"; do
  read -r script dir pid <<<"$c"
  wait "$pid"
  # minicluster: HADOOP_CONF_DIR, PATH with its bin/yarn (for skein), JAVA_HOME,
  # PRIMUS_MINICLUSTER_DIR. k8s-cluster: KUBECONFIG, PRIMUS_K8S_CLUSTER_DIR. kafka:
  # PRIMUS_KAFKA_BOOTSTRAP, PRIMUS_KAFKA_DIR.
  # shellcheck disable=SC1091
  . "$dir/env.sh"
done
started=1
rc=0
# A skip whose reason is not in tests/conftest.py's allowed list fails the run (everything a test
# needs is here): unless a cluster was left out, whose tests may then skip.
if [ -z "${PRIMUS_NO_MINICLUSTER:-}${PRIMUS_NO_K8S:-}${PRIMUS_NO_KAFKA:-}" ]; then
  export PRIMUS_CI_STRICT_SKIPS=1
fi
# The 30 slowest tests close the report: what to look at when the run nears its time budget.
.venv/bin/python -m pytest -q -ra --durations=30 "$@" || rc=$?
stop_clusters
trap - EXIT
for c in "${clusters[@]}"; do
  read -r script dir pid <<<"$c"
  if [ "$rc" = 0 ]; then
    rm -rf "$dir"
  else
    echo "test: $script kept its logs in $dir" >&2
  fi
done
# Once more on the oldest Airflow supported (its venv was built in phase 1): the provider's unit
# tests and one `airflow dags test`; needs no cluster. PRIMUS_NO_OLDEST_AIRFLOW=1 leaves it out.
if [ -z "${PRIMUS_NO_OLDEST_AIRFLOW:-}" ]; then
  # Its skips for features of Airflow 3.3 and for the extras that venv lacks are allowed there.
  PRIMUS_CI_STRICT_SKIPS=oldest-airflow scripts/test-oldest-airflow.sh run || rc=$?
fi
exit "$rc"
