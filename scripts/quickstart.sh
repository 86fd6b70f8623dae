#!/usr/bin/env bash
# Run the quickstart DAG end to end with Airflow on this machine: a ps + worker training job
# on the local backend, submitted and watched by PrimusSubmitJobOperator (`airflow dags test`).
# Airflow's own log goes to .airflow/quickstart.log; the job's progress is shown as it happens.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

export AIRFLOW_HOME="${AIRFLOW_HOME:-$PWD/.airflow}"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/example_dags" AIRFLOW__CORE__LOAD_EXAMPLES=False
mkdir -p "$AIRFLOW_HOME"
.venv/bin/airflow db migrate >"$AIRFLOW_HOME/db-migrate.log" 2>&1 \
  || { tail -20 "$AIRFLOW_HOME/db-migrate.log"; exit 1; }

echo "airflow dags test primus_quickstart (full log: $AIRFLOW_HOME/quickstart.log)"
set +e
.venv/bin/airflow dags test primus_quickstart 2>&1 | tee "$AIRFLOW_HOME/quickstart.log" \
  | grep --line-buffered -E "Primus job|\[(ps|worker)-[0-9]+ std|DagRun Finished|ERROR|Error" \
  | sed -E 's/^[0-9T:.-]+Z \[[a-z]+ *\] //; s/ +\[airflow[^]]*\].*$//; s/, run_start_date.*(state=[a-z]+).*/ \1/'
code=${PIPESTATUS[0]}
set -e
app_id=$(grep -oE "Submitted Primus job [a-z0-9-]+" "$AIRFLOW_HOME/quickstart.log" | tail -1 | awk '{print $4}')
[ -n "$app_id" ] && .venv/bin/primus status "$app_id"
exit "$code"
