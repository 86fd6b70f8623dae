#!/usr/bin/env bash
# The hdfs provider (WebHDFSHook, for PrimusPartitionSensor on HDFS) and the kerberos extra (YARN
# with a keytab, tests/cluster/test_kerberos.py) into .venv. Both pull in gssapi, whose build needs
# krb5-config: Debian's libkrb5-dev, installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if .venv/bin/python -c "import airflow.providers.apache.hdfs.hooks.webhdfs, gssapi" 2>/dev/null; then
  exit 0
fi
if ! command -v krb5-config >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libkrb5-dev) >/dev/null
  else
    echo "install-hdfs-provider: krb5-config is missing; install Debian's libkrb5-dev (as root) first" >&2
    exit 1
  fi
fi
echo "install-hdfs-provider: installing the hdfs provider (builds gssapi the first time: a few minutes)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
.venv/bin/python -m pip install --quiet -e '.[test,hdfs,kerberos]' >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
