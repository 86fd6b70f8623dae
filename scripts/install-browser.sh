#!/usr/bin/env bash
# Debian's chromium, which the web page's browser tests (tests/ui) and bench/ui_load.py drive through
# Playwright: installed here when /usr/bin/chromium is missing. Quiet unless it fails.
set -euo pipefail

[ -x /usr/bin/chromium ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-browser: /usr/bin/chromium is missing; install Debian's chromium (as root) first" >&2
  exit 1
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) \
  >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
