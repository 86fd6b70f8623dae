#!/usr/bin/env bash
# A Hadoop minicluster for tests and for trying `--backend yarn` by hand: one JVM on 127.0.0.1
# running HDFS (NameNode + 1 DataNode, WebHDFS on) and YARN (ResourceManager + 1 NodeManager
# that runs containers as local processes, 8 GiB / 16 vcores).
#
#   scripts/minicluster.sh start [DIR]    # build if needed, start, wait until ready
#   scripts/minicluster.sh start [DIR] --kerberos   # the same, secure (PRIMUS_MINICLUSTER_KERBEROS=1)
#   . DIR/env.sh                          # HADOOP_CONF_DIR, PATH (DIR/bin/yarn), JAVA_HOME, ...
#   scripts/minicluster.sh status [DIR]   # prints DIR/ready.json (the addresses); rc 1 if down
#   scripts/minicluster.sh stop [DIR]     # SIGTERM, then kills any container process left
#   scripts/minicluster.sh datanode-stop|datanode-start [DIR]   # a fault: the DataNode down, up again
#   scripts/minicluster.sh resourcemanager-restart [DIR]  # a fault: the RM restarts (work-preserving)
#
# DIR defaults to $PRIMUS_MINICLUSTER_DIR or /tmp/primus-minicluster. It holds the log
# (minicluster.log), the cluster's data, the client configuration (conf/), bin/yarn and env.sh.
# Needs Java 17 and Maven; jars are cached in ~/.m2, the built launcher and both classpaths in
# ~/.cache/primus-minicluster/<hash of the poms and sources> (a warm start needs no network).
#
# PRIMUS_MINICLUSTER_CONF="key=value,..." adds Hadoop settings to HDFS and YARN (tests: short-lived
# delegation tokens).
#
# --kerberos: a MiniKdc in the same JVM (realm EXAMPLE.COM), hadoop.security.authentication=kerberos
# and authorization, SPNEGO on the RM's and NM's web servers and on WebHDFS. DIR/krb5.conf, the
# keytabs in DIR/keytabs/ (service.keytab: every daemon's; user.keytab: the local user's principal);
# env.sh exports KRB5_CONFIG, KRB5CCNAME (a cache in DIR), PRIMUS_TEST_PRINCIPAL, PRIMUS_TEST_KEYTAB
# and JAVA_TOOL_OPTIONS (Java does not read KRB5_CONFIG: skein's driver finds the KDC by it).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SRC="$HERE/minicluster"
CMD=${1:-}
DIR=""
KERBEROS=${PRIMUS_MINICLUSTER_KERBEROS:-}
for arg in "${@:2}"; do
  case "$arg" in
    --kerberos) KERBEROS=1 ;;
    *) DIR=$arg ;;
  esac
done
DIR=${DIR:-${PRIMUS_MINICLUSTER_DIR:-/tmp/primus-minicluster}}
START_TIMEOUT=${PRIMUS_MINICLUSTER_TIMEOUT:-240}
CACHE_ROOT=${PRIMUS_MINICLUSTER_CACHE:-$HOME/.cache/primus-minicluster}

# Hadoop on Java 17 reflects into these JDK packages.
JAVA_OPENS=(
  --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED
  --add-opens=java.base/java.io=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED
  --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-opens=java.base/sun.net.dns=ALL-UNNAMED
  --add-opens=java.base/sun.net.util=ALL-UNNAMED
  # Kerberos (hadoop-auth's KerberosUtil reads the JDK's krb5 configuration).
  --add-exports=java.security.jgss/sun.security.krb5=ALL-UNNAMED
  --add-opens=java.security.jgss/sun.security.krb5=ALL-UNNAMED
)

die() { echo "minicluster: $*" >&2; exit 1; }

java_home() {
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    echo "$JAVA_HOME"
  else
    command -v java >/dev/null || die "java not found (Java 17 is needed)"
    dirname "$(dirname "$(readlink -f "$(command -v java)")")"
  fi
}

# Build the launcher and compute both classpaths once per content of the Maven projects.
build() {
  local key
  key=$(cat "$SRC/pom.xml" "$SRC/client/pom.xml" "$SRC"/src/main/resources/* \
        "$SRC"/src/main/java/primus/minicluster/*.java | sha256sum | cut -c1-16)
  CACHE="$CACHE_ROOT/$key"
  if [ -f "$CACHE/launcher.jar" ] && [ -f "$CACHE/cluster.classpath" ] && [ -f "$CACHE/client.classpath" ]; then
    return
  fi
  command -v mvn >/dev/null || die "mvn not found (Maven 3 is needed to fetch Hadoop)"
  echo "minicluster: building the launcher (first run downloads Hadoop from Maven Central)" >&2
  local tmp log
  mkdir -p "$CACHE_ROOT"
  tmp=$(mktemp -d "$CACHE_ROOT/build.XXXXXX")
  log="$tmp/mvn.log"
  # Offline first (warm ~/.m2), online when something is missing.
  local mvn_ok=0
  for offline in -o ""; do
    if mvn -q -B $offline -f "$SRC/pom.xml" package -DskipTests >"$log" 2>&1 &&
       mvn -q -B $offline -f "$SRC/pom.xml" dependency:build-classpath \
          -Dmdep.outputFile="$tmp/cluster.classpath" >>"$log" 2>&1 &&
       mvn -q -B $offline -f "$SRC/client/pom.xml" dependency:build-classpath \
          -Dmdep.outputFile="$tmp/client.classpath" >>"$log" 2>&1; then
      mvn_ok=1
      break
    fi
  done
  if [ "$mvn_ok" != 1 ]; then
    tail -40 "$log" >&2
    die "Maven build failed (log above, full log in $log)"
  fi
  cp "$SRC"/target/primus-minicluster-1.jar "$tmp/launcher.jar"
  rm -rf "$CACHE"
  mv "$tmp" "$CACHE"
}

is_running() {
  [ -f "$DIR/minicluster.pid" ] && kill -0 "$(cat "$DIR/minicluster.pid")" 2>/dev/null
}

write_client_files() {
  local jhome=$1 client_cp=$2
  mkdir -p "$DIR/bin"
  # `yarn classpath [--glob]`: what skein's client starts its Java driver with. `yarn application
  # -list | -kill ID` through the ResourceManager's REST API.
  cat >"$DIR/bin/yarn" <<EOF
#!/usr/bin/env bash
# Written by scripts/minicluster.sh: the few \`yarn\` subcommands clients of the minicluster need.
set -euo pipefail
case "\${1:-}" in
  classpath)
    echo "$DIR/conf:$client_cp" ;;
  application)
    exec python3 - "\${@:2}" <<'PY'
import getpass, json, sys, urllib.request
rm = json.load(open("$DIR/ready.json"))["rm_web"]
args = sys.argv[1:]
if args[:1] == ["-list"]:
    apps = json.load(urllib.request.urlopen(rm + "/ws/v1/cluster/apps"))["apps"] or {"app": []}
    for a in apps["app"]:
        if "-appStates" in args or a["state"] not in ("FINISHED", "FAILED", "KILLED"):
            print("\t".join([a["id"], a["name"], a["applicationType"], a["user"], a["queue"],
                             a["state"], a["finalStatus"], a.get("trackingUrl") or ""]))
elif args[:1] == ["-kill"] and len(args) == 2:
    req = urllib.request.Request(rm + "/ws/v1/cluster/apps/%s/state?user.name=%s" % (args[1], getpass.getuser()),
                                 method="PUT",
                                 data=b'{"state": "KILLED"}',
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req).read()
    print("Killing application " + args[1])
else:
    sys.exit("usage: yarn application -list [-appStates ALL] | -kill APP_ID")
PY
    ;;
  *)
    echo "yarn (minicluster): only 'classpath [--glob]' and 'application -list|-kill ID'" >&2
    exit 2 ;;
esac
EOF
  chmod +x "$DIR/bin/yarn"
  cat >"$DIR/env.sh" <<EOF
# Source this to use the minicluster in $DIR (written by scripts/minicluster.sh).
export PRIMUS_MINICLUSTER_DIR="$DIR"
export HADOOP_CONF_DIR="$DIR/conf"
export JAVA_HOME="$jhome"
export PATH="$DIR/bin:\$PATH"
# skein keeps its certificate and global-driver files here instead of ~/.skein.
export SKEIN_CONFIG="$DIR/skein"
EOF
  if [ -n "$KERBEROS" ]; then
    cat >>"$DIR/env.sh" <<EOF
# Kerberos mode: the MiniKdc's realm, the test user's principal and keytab.
export KRB5_CONFIG="$DIR/krb5.conf"
export KRB5CCNAME="FILE:$DIR/krb5cc"
export PRIMUS_TEST_PRINCIPAL="$(id -un)@EXAMPLE.COM"
export PRIMUS_TEST_KEYTAB="$DIR/keytabs/user.keytab"
export JAVA_TOOL_OPTIONS="-Djava.security.krb5.conf=$DIR/krb5.conf"
EOF
  fi
}

start() {
  if is_running && [ -f "$DIR/ready.json" ]; then
    echo "minicluster: already running in $DIR" >&2
    return 0
  fi
  local t0 jhome
  t0=$(date +%s)
  build
  jhome=$(java_home)
  local t1
  t1=$(date +%s)
  rm -rf "$DIR/conf" "$DIR/target" "$DIR/hdfs" "$DIR/tmp" "$DIR/ready.json" "$DIR/kdc" "$DIR/keytabs" "$DIR/krb5cc"
  mkdir -p "$DIR/conf"
  local client_cp app_cp
  client_cp=$(cat "$CACHE/client.classpath")
  app_cp="\$HADOOP_CONF_DIR,${client_cp//:/,}"
  write_client_files "$jhome" "$client_cp"
  (
    cd "$DIR"
    export HADOOP_CONF_DIR="$DIR/conf" JAVA_HOME="$jhome"
    unset CLASSPATH HADOOP_HOME
    exec setsid "$jhome/bin/java" -Xmx1g -XX:+UseSerialGC "${JAVA_OPENS[@]}" \
      -Djava.net.preferIPv4Stack=true \
      -cp "$CACHE/launcher.jar:$(cat "$CACHE/cluster.classpath")" \
      primus.minicluster.Launcher "$DIR" "$DIR/conf" "$DIR/ready.json" "$app_cp" ${KERBEROS:+kerberos} \
      >"$DIR/minicluster.log" 2>&1 </dev/null
  ) &
  echo $! >"$DIR/minicluster.pid"
  local deadline=$((t1 + START_TIMEOUT))
  while [ ! -f "$DIR/ready.json" ]; do
    if ! is_running; then
      tail -40 "$DIR/minicluster.log" >&2
      die "the JVM exited before the cluster was ready (log: $DIR/minicluster.log)"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      tail -40 "$DIR/minicluster.log" >&2
      stop >/dev/null 2>&1 || true
      die "not ready after ${START_TIMEOUT}s (log: $DIR/minicluster.log)"
    fi
    sleep 0.5
  done
  local t2
  t2=$(date +%s)
  echo "minicluster: ready in $((t2 - t0))s (build/cache $((t1 - t0))s, start-up $((t2 - t1))s); use it with: . $DIR/env.sh" >&2
}

# Processes (containers, skein drivers started from the cluster) whose working directory lies
# inside DIR.
leftovers() {
  local p cwd
  for p in /proc/[0-9]*; do
    cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
    case "$cwd" in
      "$DIR"/*) echo "${p#/proc/}" ;;
    esac
  done
}

stop() {
  if is_running; then
    local pid i
    pid=$(cat "$DIR/minicluster.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 60); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "minicluster: JVM $pid ignored SIGTERM for 30s, killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$DIR/minicluster.pid" "$DIR/ready.json"
  local left
  left=$(leftovers)
  if [ -n "$left" ]; then
    echo "minicluster: killing processes left in $DIR: $(echo $left)" >&2
    # shellcheck disable=SC2086
    kill -KILL $left 2>/dev/null || true
  fi
  echo "minicluster: stopped ($DIR)" >&2
}

status() {
  if is_running && [ -f "$DIR/ready.json" ]; then
    cat "$DIR/ready.json"
  else
    echo "minicluster: not running ($DIR)" >&2
    return 1
  fi
}

# A fault on request (the chaos suite): the launcher carries it out and answers (Launcher.serveControl).
control() {  # COMMAND
  is_running || die "not running ($DIR)"
  mkdir -p "$DIR/control"
  local name="$$-$(date +%s%N)" answer i
  echo "$1" >"$DIR/control/$name.tmp"
  mv "$DIR/control/$name.tmp" "$DIR/control/$name.cmd"
  for i in $(seq 1200); do
    if [ -f "$DIR/control/$name.out" ]; then
      answer=$(cat "$DIR/control/$name.out")
      rm -f "$DIR/control/$name.out"
      echo "minicluster: $answer" >&2
      [ "${answer#ok}" != "$answer" ]
      return
    fi
    sleep 0.1
  done
  die "no answer to $1 within 120s (log: $DIR/minicluster.log)"
}

case "$CMD" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  build) build; echo "$CACHE" ;;
  datanode-stop|datanode-start|resourcemanager-restart) control "$CMD" ;;
  *) echo "usage: $0 start|stop|status|build|datanode-stop|datanode-start|resourcemanager-restart [DIR]" \
       "[--kerberos]" >&2; exit 2 ;;
esac
