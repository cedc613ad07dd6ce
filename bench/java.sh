#!/usr/bin/env bash
# The Java side of the benchmark: the official Apache RocketMQ 5 Java client
# (org.apache.rocketmq:rocketmq-client-java) driven by bench/java/Bench.java.
#
#   java.sh fetch              copy the client jars into the cache (once; needs Maven Central)
#   java.sh run MODE ARGS...   fetch if needed, run Bench.java, print its one JSON line
#       run produce ENDPOINT TOPIC COUNT SIZE
#       run consume ENDPOINT GROUP TOPIC COUNT INVISIBLE_S BATCH [sync|async]
#       run hold    ENDPOINT GROUP TOPIC COUNT INVISIBLE_S HOLD_S
#       run leases  ENDPOINT GROUP TOPIC COUNT INVISIBLE_S HOLD_S INFLIGHT
#       run drain   ENDPOINT GROUP TOPIC GO_FILE IDLE_S
#   java.sh lib                print the lib dir (after fetching)
#
# Environment (all optional):
#   MQLEASE_JAVA_CLIENT_VERSION  5.0.7                rocketmq-client-java version
#   MQLEASE_CACHE                $HOME/.cache/mqlease jars go to <cache>/java-client-<ver>/lib
#   MQLEASE_JAVA_OPTS            JVM heap/GC flags (default below; replaces them, not appended)
#   MQLEASE_JAVA_LOGS            client log dir (default: a fresh mktemp dir, removed afterwards
#                                unless the run failed)
#   MQLEASE_JAVA_TIMEOUT         hard wall-clock limit per run in s (default 600)
#   MQLEASE_JAVA_SOURCE_LAUNCHER 1 = run Bench.java through the single-file source launcher
#                                (javac runs inside the measured JVM and inflates rss_kb by
#                                tens of MB); default: compile it once into the cache and run
#                                the class, so rss_kb is the client's, not the compiler's.
# Exit status of `run` is Bench's: 0 complete, 3 incomplete (JSON still printed), 2 usage,
# 1 failed to start, 4 Bench's own watchdog; 124 if MQLEASE_JAVA_TIMEOUT killed it.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$SCRIPT_DIR/java/Bench.java
VERSION=${MQLEASE_JAVA_CLIENT_VERSION:-5.0.7}
CACHE=${MQLEASE_CACHE:-$HOME/.cache/mqlease}
BASE=$CACHE/java-client-$VERSION
LIB=$BASE/lib
# one class dir per version of Bench.java: checkouts with different sources (worktrees
# benchmarking at once) must never run each other's compiled class
CLASSES=$BASE/classes-$(sha1sum "$SRC" | cut -c1-12)
TIMEOUT=${MQLEASE_JAVA_TIMEOUT:-600}
# Heap capped at 256 MiB; serial GC (no G1 remembered sets/concurrent threads: the usual
# footprint-conscious choice for a single-connection client).
read -r -a JOPTS <<<"${MQLEASE_JAVA_OPTS:--Xms32m -Xmx256m -XX:+UseSerialGC}"

APT_LINE='apt-get install -y openjdk-17-jdk-headless maven'

die() { echo "java.sh: error: $*" >&2; exit 1; }

need_java() {
  command -v java >/dev/null 2>&1 || { echo "java.sh: java not found; install it with:" >&2; echo "  $APT_LINE" >&2; exit 1; }
  local v
  v=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
  case $v in 1.*|9|10|''|11|12|13|14|15|16) echo "java.sh: java $v is too old (need 17); install:" >&2; echo "  $APT_LINE" >&2; exit 1 ;; esac
}

# Complete only once the marker exists. lib/ only ever appears whole: mvn fills a fresh
# directory beside it, renamed to lib/ once the jars are all there, because copy-dependencies
# keeps any jar already in its output directory that is newer than the repository's, a jar a
# cut download or copy left half-written included.
lib_complete() { [[ -f $LIB/.complete && -f $LIB/rocketmq-client-java-$VERSION.jar ]]; }

cmd_fetch() {
  need_java
  lib_complete && return 0
  lock
  lib_complete && { unlock; return 0; }
  command -v mvn >/dev/null 2>&1 || { echo "java.sh: mvn not found (needed once to fetch the client jars); install it with:" >&2; echo "  $APT_LINE" >&2; exit 1; }
  echo "java.sh: fetching rocketmq-client-java $VERSION into $LIB (one-time, needs Maven Central)" >&2
  # Under the lock nobody else writes here: what a killed fetch left goes.
  local part=$BASE/lib.part mlog=$BASE/mvn.log rc=0
  rm -rf "$part" "$LIB"
  mkdir -p "$part"
  # -C (--strict-checksums): a download that does not match its .sha1 fails the fetch;
  # Maven 3.8's default only warns (unseen under -q) and keeps the jar
  mvn -B -q -C -f "$SCRIPT_DIR/java/pom.xml" -Dclient.version="$VERSION" \
    org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DoutputDirectory="$part" -DincludeScope=runtime </dev/null >"$mlog" 2>&1 || rc=$?
  sed 's/\x1b\[[0-9;]*m//g; /^[[:space:]]*$/d' "$mlog" >&2
  if ((rc != 0)) && grep -q 'Checksum validation failed' "$mlog"; then
    die "mvn stopped: a downloaded file failed its checksum validation (it does not match its checksum: corrupted or altered on the way; or the repository served no checksum; log $mlog); nothing was cached, try again or check the network's proxy or mirror"
  fi
  ((rc == 0)) || die "mvn could not fetch rocketmq-client-java $VERSION (exit $rc, log $mlog); try MQLEASE_JAVA_CLIENT_VERSION=5.0.8 or 5.0.6"
  [[ -f $part/rocketmq-client-java-$VERSION.jar ]] || die "mvn finished but $part lacks rocketmq-client-java-$VERSION.jar"
  touch "$part/.complete"
  mv -T "$part" "$LIB"
  unlock
}

# Serialises fetch/compile of concurrent java.sh calls on the same cache dir (fd 8).
lock() {
  mkdir -p "$BASE"
  exec 8>"$BASE/.lock"
  flock -w 600 8 || die "timed out waiting for the lock $BASE/.lock"
}
unlock() { exec 8>&-; }

# Compiles Bench.java into $CLASSES when the source is newer than the class (or the class is
# missing), under the lock.
compile() {
  command -v javac >/dev/null 2>&1 || { echo "java.sh: javac not found; install it with:" >&2; echo "  $APT_LINE" >&2; exit 1; }
  [[ -f $CLASSES/Bench.class && $CLASSES/Bench.class -nt $SRC ]] && return 0
  lock
  if ! [[ -f $CLASSES/Bench.class && $CLASSES/Bench.class -nt $SRC ]]; then
    rm -rf "$CLASSES"
    javac -nowarn -d "$CLASSES" -cp "$LIB/*" "$SRC" >&2 || { rm -rf "$CLASSES"; die "javac failed on $SRC"; }
  fi
  unlock
}

cmd_run() {
  [[ $# -ge 1 ]] || { echo "usage: $0 run produce|sendasync|consume|push|hold|leases|drain ARGS..." >&2; exit 2; }
  cmd_fetch
  local logs rc=0 keep=${MQLEASE_JAVA_LOGS:+1}
  logs=${MQLEASE_JAVA_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/mqlease-jbench.XXXXXX")}
  mkdir -p "$logs"
  local props=(-Drocketmq.log.root="$logs" -Drocketmq.log.level=warn)
  if [[ ${MQLEASE_JAVA_SOURCE_LAUNCHER:-0} == 1 ]]; then
    timeout -k 5 "$TIMEOUT" java "${JOPTS[@]}" "${props[@]}" -cp "$LIB/*" "$SRC" "$@" </dev/null || rc=$?
  else
    compile
    timeout -k 5 "$TIMEOUT" java "${JOPTS[@]}" "${props[@]}" -cp "$CLASSES:$LIB/*" Bench "$@" </dev/null || rc=$?
  fi
  if ((rc != 0)) && [[ -n $(ls -A "$logs" 2>/dev/null) ]]; then
    echo "java.sh: Bench $1 exited $rc; client logs in $logs" >&2
  elif [[ -z $keep ]]; then
    rm -rf "$logs"   # empty, or a successful run's warnings
  fi
  return "$rc"
}

case ${1:-} in
  fetch) cmd_fetch ;;
  lib) cmd_fetch; echo "$LIB" ;;
  run) shift; cmd_run "$@" ;;
  *) echo "usage: $0 fetch | lib | run MODE ARGS..." >&2; exit 2 ;;
esac
