#!/usr/bin/env bash
# Runs CMD in a private network namespace: only `lo`, brought up, so 127.0.0.1 works and nothing
# reaches another machine. scripts/k8s-cluster.sh needs it: its node agent puts pod IPs
# (10.244.0.0/24) on this `lo`, which the machine's own network never sees. Everything that
# downloads (pip, Maven, the Go build) has to run before, outside. Run by a user other than root,
# CMD runs as root of a new user namespace (unprivileged user namespaces must be allowed).
#
#   scripts/in-netns.sh CMD [ARGS...]
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
userns=()
[ "$(id -u)" = 0 ] || userns=(--user --map-root-user)
exec unshare "${userns[@]}" --net -- bash -c 'ip link set lo up && exec "$@"' in-netns "$@"
