#!/usr/bin/env bash
# The hdfs provider (WebHDFSHook, for PrimusPartitionSensor on HDFS) into .venv. It pulls in
# gssapi, whose build needs krb5-config: Debian's libkrb5-dev, installed here when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v krb5-config >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libkrb5-dev) >/dev/null
  else
    echo "install-hdfs-provider: krb5-config is missing; install Debian's libkrb5-dev (as root) first" >&2
    exit 1
  fi
fi
.venv/bin/python -m pip install --quiet -e '.[test,hdfs]'
