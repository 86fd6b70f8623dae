#!/usr/bin/env bash
# A real Kubernetes control plane for tests and for trying the Kubernetes backend by hand:
# etcd + kube-apiserver + kube-controller-manager built from the Go module proxy, and one node
# served by scripts/k8s/node_agent.py, a stand-in for the kubelet that runs pods as local
# processes (no images, no container runtime).
#
#   scripts/k8s-cluster.sh build          # once per version, needs network (Go module proxy)
#   scripts/k8s-cluster.sh built          # rc 0 (and the bin folder) if built
#   scripts/in-netns.sh bash              # start/stop/status need a private network namespace
#   scripts/k8s-cluster.sh start DIR      # certificates, etcd, apiserver, controller manager, node
#   . DIR/env.sh                          # KUBECONFIG, PRIMUS_K8S_CLUSTER_DIR
#   scripts/k8s-cluster.sh status DIR     # prints DIR/ready.json; rc 1 if down
#   scripts/k8s-cluster.sh stop DIR       # ends what start started (pid files), nothing else
#
# Pods get IPs from 10.244.0.0/24, added to `lo`: the API server's service and pod proxies refuse
# loopback addresses. That is why start runs only where `lo` is the only interface (unshare -n,
# see scripts/in-netns.sh): nothing is added to the machine's own network. The API server listens
# on https://127.0.0.1:16443 (PRIMUS_K8S_API_PORT), below the ephemeral range the Hadoop
# minicluster takes its ports from. DIR holds pki/, etcd data (fresh on every start), logs/,
# pods/ (each pod's folder with its containers' logs) and the kubeconfigs.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
CMD=${1:-}
DIR=${2:-${PRIMUS_K8S_CLUSTER_DIR:-/tmp/primus-k8s}}
VERSION=${PRIMUS_K8S_VERSION:-1.34.4}
CACHE=${PRIMUS_K8S_CACHE:-$HOME/.cache/primus-k8s}/v$VERSION
BIN=$CACHE/bin
API_PORT=${PRIMUS_K8S_API_PORT:-16443}
KCM_PORT=$((API_PORT + 1))
ETCD_PORT=$((API_PORT + 2))
ETCD_PEER_PORT=$((API_PORT + 3))
NODE_IP=10.244.0.1
KUBELET_PORT=10250
PYTHON=${PRIMUS_K8S_PYTHON:-$REPO/.venv/bin/python}
# The components, in start order; stop goes the other way.
COMPONENTS=(etcd kube-apiserver kube-controller-manager node-agent)
export PATH=/usr/local/go/bin:$PATH

die() { echo "k8s-cluster: $*" >&2; exit 1; }

# kube-apiserver, kube-controller-manager and etcd from a wrapper Go module: k8s.io/kubernetes
# cannot be `go install`ed (its go.mod replaces its staging modules with local paths), so the
# wrapper pins each staging module to the matching v0.x release instead.
build() {
  built && return
  command -v go >/dev/null || die "go not found (Go 1.24+ builds the Kubernetes binaries)"
  echo "k8s-cluster: building Kubernetes v$VERSION (first time: ~8 min, 2 GB RAM, network)" >&2
  local wrap=$CACHE/wrap gomod ldflags p
  mkdir -p "$wrap" "$BIN"
  cd "$wrap"
  gomod=$(go mod download -json "k8s.io/kubernetes@v$VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
  {
    printf 'module primus.test/k8sbins\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$VERSION"
    grep "=> ./staging/src/" "$gomod" | awk -v v="v0.${VERSION#1.}" '{print "\t" $1 " => " $1 " " v}'
    echo ")"
  } >go.mod
  # etcd: the version this Kubernetes release pins, through its go.mod.
  cat >tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
EOF
  go mod tidy
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=v$VERSION -X $p.gitMajor=${VERSION%%.*} -X $p.gitMinor=$(echo "$VERSION" | cut -d. -f2)"
  done
  go build -trimpath -ldflags "$ldflags" -o "$BIN/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager go.etcd.io/etcd/server/v3
  mv -f "$BIN/server" "$BIN/etcd"  # Go names the binary after the package path's last element
  echo "$VERSION" >"$BIN/.version"
}

in_private_netns() { [ -z "$(ip -o link show | grep -v ': lo:')" ]; }

# A CA, the API server's serving cert, client certs (admin, controller manager, the API server as
# the kubelet's client), the node agent's serving cert and the service-account signing key.
# EC keys: generating seven RSA keys costs seconds.
certs() {
  local pki=$DIR/pki
  mkdir -p "$pki"
  cd "$pki"
  key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null; }
  sign() { # NAME SUBJECT EXTENSIONS...
    local name=$1 subject=$2
    shift 2
    key "$name"
    printf '%s\n' "$@" >"$name.ext"
    openssl req -new -key "$name.key" -subj "$subject" -out "$name.csr" 2>/dev/null
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 \
      -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  }
  key ca
  openssl req -x509 -new -key ca.key -subj "/CN=primus-test-kubernetes-ca" -days 365 -out ca.crt 2>/dev/null
  local client="extendedKeyUsage=clientAuth"
  sign apiserver "/CN=kube-apiserver" "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=kubernetes-admin" "$client"
  sign kcm "/CN=system:kube-controller-manager" "$client"
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
  sign node-agent "/CN=primus-node-0" "extendedKeyUsage=serverAuth" "subjectAltName=IP:$NODE_IP"
  key sa
  openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
  rm -f ./*.csr ./*.ext ./*.srl
  local user
  for user in admin kcm; do
    cat >"$DIR/$user.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: primus-test
  cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$pki/ca.crt"}
users:
- name: $user
  user: {client-certificate: "$pki/$user.crt", client-key: "$pki/$user.key"}
contexts:
- name: primus-test
  context: {cluster: primus-test, user: $user}
current-context: primus-test
EOF
  done
}

# NAME CMD...: in its own session (stop kills the process group), pid in DIR/NAME.pid.
launch() {
  local name=$1
  shift
  setsid "$@" >"$DIR/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$DIR/$name.pid"
}

# NAME SECONDS CMD...: until CMD succeeds; fails early when NAME exited.
wait_until() {
  local name=$1 timeout=$2 deadline=$(($(date +%s) + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null || { tail -20 "$DIR/logs/$name.log" >&2; die "$name exited (log: $DIR/logs/$name.log)"; }
    [ "$(date +%s)" -lt "$deadline" ] || { tail -20 "$DIR/logs/$name.log" >&2; die "$name not ready after ${timeout}s (log: $DIR/logs/$name.log)"; }
    sleep 0.1
  done
}

api() { curl -sf --cacert "$DIR/pki/ca.crt" --cert "$DIR/pki/admin.crt" --key "$DIR/pki/admin.key" "https://127.0.0.1:$API_PORT$1"; }

start() {
  if status >/dev/null 2>&1; then
    echo "k8s-cluster: already running in $DIR" >&2
    return 0
  fi
  in_private_netns || die "start needs a private network namespace (pod IPs go on lo): run it under scripts/in-netns.sh"
  [ -x "$PYTHON" ] || die "no Python for the node agent at $PYTHON (set PRIMUS_K8S_PYTHON)"
  local t0=$SECONDS
  mkdir -p "$DIR/logs"
  DIR=$(cd "$DIR" && pwd)  # the certificates' and kubeconfigs' paths must not depend on the cwd
  build
  stop >/dev/null 2>&1 || true
  rm -rf "$DIR/etcd" "$DIR/pki" "$DIR/pods" "$DIR/ready.json" "$DIR/node-agent.ready"
  certs
  local pki=$DIR/pki
  launch etcd "$BIN/etcd" --name primus-test --data-dir "$DIR/etcd" --unsafe-no-fsync --log-level=warn \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "primus-test=http://127.0.0.1:$ETCD_PEER_PORT"
  wait_until etcd 30 curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  # There is no default route in the namespace, hence the explicit advertise address; loopback is
  # invalid in Endpoints, hence no endpoint reconciler. The kubelet flags serve pods/log. ConfigMaps
  # are watched from etcd, without the API server's watch cache: a test compacts etcd to see a watch
  # from a version gone answered 410 Gone (the cache would still serve it).
  launch kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none --profiling=false --allow-privileged=true --authorization-mode=RBAC \
    --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --client-ca-file="$pki/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP --watch-cache-sizes=configmaps#0
  wait_until kube-apiserver 90 api /readyz
  # Without node-lifecycle and taint-eviction controllers: the node agent posts no lease, and
  # those would taint its node and evict its pods after ~5 min.
  launch kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$DIR/kcm.kubeconfig" \
    --authentication-kubeconfig="$DIR/kcm.kubeconfig" --authorization-kubeconfig="$DIR/kcm.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
    --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --controllers='*,-node-lifecycle-controller,-taint-eviction-controller'
  # Pods are refused until the service account controller made the namespace's `default` account.
  wait_until kube-controller-manager 60 api /api/v1/namespaces/default/serviceaccounts/default
  launch node-agent "$PYTHON" "$HERE/k8s/node_agent.py" --kubeconfig "$DIR/admin.kubeconfig" --dir "$DIR" \
    --node-ip "$NODE_IP" --port "$KUBELET_PORT" --cert "$pki/node-agent.crt" --key "$pki/node-agent.key" \
    --client-ca "$pki/ca.crt" --ready-file "$DIR/node-agent.ready"
  wait_until node-agent 30 test -f "$DIR/node-agent.ready"
  cat >"$DIR/env.sh" <<EOF
# Source this to use the Kubernetes test cluster in $DIR (written by scripts/k8s-cluster.sh).
export KUBECONFIG="$DIR/admin.kubeconfig"
export PRIMUS_K8S_CLUSTER_DIR="$DIR"
EOF
  printf '{"api": "https://127.0.0.1:%s", "etcd": "http://127.0.0.1:%s", "kubeconfig": "%s", "node": "primus-node-0", "node_ip": "%s", "pod_cidr": "10.244.0.0/24"}\n' \
    "$API_PORT" "$ETCD_PORT" "$DIR/admin.kubeconfig" "$NODE_IP" >"$DIR/ready.json"
  echo "k8s-cluster: ready in $((SECONDS - t0))s; use it with: . $DIR/env.sh" >&2
}

# SIGTERM the node agent's process group (it kills its pods and removes its addresses), then the
# control plane's all at once; SIGKILL what is left after 10 s.
stop() {
  terminate node-agent
  terminate kube-controller-manager kube-apiserver etcd
  rm -f "$DIR/ready.json"
  # Pod processes left by a node agent that could not clean up (killed): those in a pod folder.
  local p cwd
  for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    case "$cwd" in "$DIR"/pods/*) kill -KILL "${p#/proc/}" 2>/dev/null || true ;; esac
  done
  echo "k8s-cluster: stopped ($DIR)" >&2
}

terminate() {  # NAME...
  local name pid alive pids=()
  for name in "$@"; do
    [ -f "$DIR/$name.pid" ] || continue
    pids+=("$(cat "$DIR/$name.pid")")
    kill -TERM -- "-${pids[-1]}" 2>/dev/null || true
  done
  for _ in $(seq 100); do
    alive=""
    for pid in "${pids[@]}"; do
      kill -0 "$pid" 2>/dev/null && alive=1
    done
    [ -n "$alive" ] || break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  for name in "$@"; do
    rm -f "$DIR/$name.pid"
  done
}

status() {
  local name
  for name in "${COMPONENTS[@]}"; do
    [ -f "$DIR/$name.pid" ] && kill -0 "$(cat "$DIR/$name.pid")" 2>/dev/null ||
      { echo "k8s-cluster: $name not running ($DIR)" >&2; return 1; }
  done
  [ -f "$DIR/ready.json" ] || { echo "k8s-cluster: not ready ($DIR)" >&2; return 1; }
  cat "$DIR/ready.json"
}

built() {
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ] && [ -x "$BIN/etcd" ] &&
    [ "$(cat "$BIN/.version" 2>/dev/null)" = "$VERSION" ]
}

case "$CMD" in
  build) build; echo "$BIN" ;;
  built) built && echo "$BIN" || { echo "k8s-cluster: Kubernetes v$VERSION not built in $BIN" >&2; exit 1; } ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 build | start|stop|status DIR" >&2; exit 2 ;;
esac
