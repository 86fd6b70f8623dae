#!/usr/bin/env bash
# The provider on the OLDEST Airflow that pyproject.toml declares: a second, smaller venv
# (.venv-oldest: that Airflow, this package without extras, pytest) runs the provider's unit tests
# and one `airflow dags test` of an example DAG on the local backend. Tests of features the oldest
# Airflow lacks skip, naming the version (airflow_provider_primus/version_compat.py).
#
#   scripts/test-oldest-airflow.sh [install|run] [PYTEST ARGS...]
#
# install: create or refresh the venv (needs PyPI); run: the tests only (offline, as in
# scripts/test.sh's network namespace); neither: both. The venv is rebuilt only when what it is
# built from changes (a stamp of this script and pyproject.toml): a warm install takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

# The newest patch of the oldest minor supported (pyproject.toml: apache-airflow>=3.2).
AIRFLOW_OLDEST=3.2.2
# Airflow's constraint files are on GitHub, which is out of reach: resolve the dependencies as PyPI
# had them soon after that release instead. With today's newest ones (svcs 26, cadwyn 9),
# 3.2.2's own `airflow dags test` fails for any DAG ('State' object has no attribute 'svcs_registry').
DEPS_AS_OF=2026-06-01T00:00:00Z
PIP_VERSION=26.3  # --uploaded-prior-to
VENV=.venv-oldest
PYTHON=${PYTHON:-python3}
# What needs no cluster and no extra: every provider unit test module, and the quickstart DAG
# through `airflow dags test`, deferred (its trigger runs through Airflow for real).
TESTS=(
  tests/provider/test_conditions.py
  tests/provider/test_provider_info.py
  tests/provider/test_hook.py
  tests/provider/test_tls_hook.py
  tests/provider/test_partition_event_trigger.py
  tests/provider/test_operator.py
  tests/provider/test_sensor_and_control.py
  tests/provider/test_trigger.py
  tests/provider/test_progress.py
  tests/provider/test_retries.py
  tests/provider/test_failed_tails.py
  tests/provider/test_job_page.py
  tests/provider/test_example_dags.py::test_every_example_dag_imports_without_errors_or_warnings
  tests/provider/test_example_dags.py::test_params_form_can_be_submitted_with_its_defaults
  "tests/provider/test_example_dags.py::test_quickstart_dag_runs_end_to_end[deferred]"
)

mode=all
case "${1:-}" in install|run) mode=$1; shift ;; esac

stamp() { cat "$0" pyproject.toml | sha256sum | cut -d' ' -f1; }

install() {
  local want
  want=$(stamp)
  if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  echo "test-oldest-airflow: building $VENV with Airflow $AIRFLOW_OLDEST (dependencies as of $DEPS_AS_OF)"
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  local log
  log=$(mktemp)
  # pip's output only when something fails.
  if ! { "$VENV/bin/python" -m pip install --quiet "pip==$PIP_VERSION" &&
         "$VENV/bin/python" -m pip install --quiet --uploaded-prior-to "$DEPS_AS_OF" \
           "apache-airflow==$AIRFLOW_OLDEST" "pytest>=8,<10" "pytest-timeout>=2.3,<3" &&
         # then this package, unbounded: only what it requires beyond that (say, a newer
         # common-compat provider) is upgraded, as for a user who adds it to such an installation
         "$VENV/bin/python" -m pip install --quiet -e .; } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
  echo "$want" >"$VENV/.stamp"
}

run() {
  if [ "$(cat "$VENV/.stamp" 2>/dev/null)" != "$(stamp)" ]; then
    echo "test-oldest-airflow: $VENV is missing or stale: run scripts/test-oldest-airflow.sh install first" >&2
    exit 1
  fi
  echo "test-oldest-airflow: the provider on Airflow $("$VENV/bin/python" -c 'import airflow; print(airflow.__version__)')"
  "$VENV/bin/python" -m pytest -q -ra -p no:cacheprovider "${TESTS[@]}" "$@"
}

case $mode in
  install) install ;;
  run) run "$@" ;;
  all) install; run "$@" ;;
esac
