#!/usr/bin/env bash
# TensorFlow (CPU) for the framework example and its test, in its own venv
# (.venv-tf) so its pins stay out of the runtime's environment. The wheels are
# kept in ~/.cache/primus-wheels: pip's HTTP cache stores nothing from this
# registry, so without the wheelhouse every run would download 320 MB again.
# (PyPI has no CPU-only torch for Linux: its wheel needs the ~3 GB CUDA libraries.)
set -euo pipefail
cd "$(dirname "$0")/.."

TF_SPEC="tensorflow-cpu==2.21.0"
WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/primus-wheels"

if .venv-tf/bin/python -c "import tensorflow" 2>/dev/null; then
  exit 0
fi
[ -x .venv-tf/bin/python ] || python3 -m venv .venv-tf
mkdir -p "$WHEELS"
if ! .venv-tf/bin/pip install --quiet --no-index --find-links "$WHEELS" "$TF_SPEC" 2>/dev/null; then
  .venv-tf/bin/pip download --quiet -d "$WHEELS" "$TF_SPEC"
  .venv-tf/bin/pip install --quiet --no-index --find-links "$WHEELS" "$TF_SPEC"
fi
TF_CPP_MIN_LOG_LEVEL=3 .venv-tf/bin/python -c "import tensorflow as tf; print('tensorflow', tf.__version__, 'in .venv-tf')" 2>/dev/null
