#!/usr/bin/env bash
# Every benchmark and docs/performance.md from their figures (bench/report.py):
#   scripts/bench.sh                 the benchmarks that need no cluster
#   scripts/bench.sh --clusters      also HDFS/YARN, Kubernetes and Kafka, each when its cluster's env.sh is sourced
#   scripts/bench.sh NAME ...        only these (the other rows of docs/performance.md stay)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || scripts/bootstrap.sh
exec .venv/bin/python bench/report.py "$@"
