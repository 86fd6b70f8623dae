#!/usr/bin/env bash
# A real ML framework for the framework examples and their tests (filled in below).
set -euo pipefail
cd "$(dirname "$0")/.."
