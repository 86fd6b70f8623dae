#!/usr/bin/env bash
# Run the ps + worker example job end to end on the local backend.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/primus submit examples/ps_worker/job.yaml --wait
