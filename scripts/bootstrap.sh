#!/usr/bin/env bash
# Create (or refresh) the project's virtualenv in .venv with everything the
# runtime, its tests and the examples need. Safe to run again: pip's cache
# (~/.cache/pip) makes a second run fast.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv (the first run downloads Airflow and its dependencies: a minute or two)"
  "$PYTHON" -m venv .venv
fi
# pip's output (and setuptools' editable-install warnings) only when something fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { .venv/bin/python -m pip install --quiet --upgrade pip && .venv/bin/python -m pip install --quiet -e '.[test]'; } \
    >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
# Byte-compile the editable packages once, as pip does for an installed one: with
# PYTHONDONTWRITEBYTECODE set (as on some machines, CI's too) every AM start would otherwise compile
# the runtime again, and the triggerer a trigger's module on its event loop (~0.1 s on a loaded machine).
.venv/bin/python -m compileall -q runtime airflow_provider_primus
