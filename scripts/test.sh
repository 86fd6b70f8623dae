#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what it needs, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/install-hdfs-provider.sh
scripts/install-framework.sh
.venv/bin/ruff check runtime airflow_provider_primus tests examples bench example_dags
.venv/bin/mypy
export PRIMUS_HOME="${PRIMUS_HOME:-$(mktemp -d /tmp/primus-test-home.XXXXXX)}"
exec .venv/bin/python -m pytest -q -ra "$@"
