#!/usr/bin/env bash
# mk/rocketmq.sh: a real Apache RocketMQ 5.x on loopback for the specs (spec/support/run-specs.sh),
# `make demo BROKER=rocketmq` and `make bench`: name server + gRPC proxy with the broker inside
# the proxy JVM ("local" mode), built from Maven Central jars (no binary zip, no Docker): the
# classes NamesrvStartup and ProxyStartup (local mode) on one flat classpath.
#
#   rocketmq.sh fetch                  copy the jars into the cache (once)
#   rocketmq.sh start                  start namesrv + proxy/broker (or reuse a running one);
#                                      returns once the broker is registered with namesrv
#   rocketmq.sh stop                   stop only what `start` started
#   rocketmq.sh restart-proxy [N]      start our proxy JVM (cluster mode: proxy N, 1 or 2) again
#                                      after it died, keeping namesrv and the store (for chaos
#                                      specs that kill it)
#   rocketmq.sh kill-proxy N           cluster mode: SIGKILL proxy N (1 or 2) and wait until it is gone
#   rocketmq.sh kill-broker a|b        cluster mode: SIGKILL broker-a or broker-b (b: MQLEASE_BROKERS=2)
#                                      and wait until it is gone (namesrv drops it when its
#                                      connection closes)
#   rocketmq.sh restart-broker a|b     cluster mode: start that broker again on its own store (a
#                                      killed one recovers its commit log, consumer offsets and pop
#                                      checkpoints); returns once it is registered with namesrv
#   rocketmq.sh status                 exit 0 if the gRPC port answers
#   rocketmq.sh env                    print MQLEASE_ENDPOINTS=... lines (cluster mode: both
#                                      proxies, "a:p;b:p")
#   rocketmq.sh topics NAME[:TYPE]... [--group G] [--orderly-group G]
#                                      create topics (4r/4w queues, TYPE default NORMAL;
#                                      FIFO|DELAY|TRANSACTION, and on 5.4+ PRIORITY: queue n
#                                      holds priority n, read highest first) and consumer groups, in one
#                                      JVM; returns once every topic is routable via namesrv
#   rocketmq.sh groups [--orderly] [--if-absent] NAME...   create consumer groups only
#                                      (--if-absent: leave a group that exists as it is)
#   rocketmq.sh lite-group NAME:PARENT...  5.5+: consumer groups bound to the LITE topic PARENT
#                                      (create the topic with `topics PARENT:LITE`)
#   rocketmq.sh broker-config KEY=VALUE...  change BrokerConfig keys of the running broker
#                                      (as `mqadmin updateBrokerConfig`; lost on restart)
#
# Environment (all optional):
#   ROCKETMQ_VERSION       5.2.0 (rocketmq-proxy 5.1.4 is not resolvable from our registry;
#                                 5.3.3, 5.4.0 and 5.5.0 work too, see rocketmq/pom.xml)
#   MQLEASE_CACHE          $HOME/.cache/mqlease      jars go to <cache>/rocketmq-<ver>/lib
#   MQLEASE_RUN            /tmp/mqlease-rocketmq     configs, store, logs, pid files
#   MQLEASE_NAMESRV_PORT   19876
#   MQLEASE_BROKER_PORT    20911   (the broker also binds PORT-2 "fast" and PORT+1 HA)
#   MQLEASE_GRPC_PORT      18081   (what clients dial: MQLEASE_ENDPOINTS)
#   MQLEASE_REMOTING_PORT  18080   (proxy remoting protocol; unused by us but always bound)
#   MQLEASE_BOOT_TIMEOUT   180     seconds to wait for each JVM's readiness line
#   MQLEASE_TX_TIMEOUT_MS  3000    broker.conf transactionTimeOut: a half message this old is checked
#   MQLEASE_TX_CHECK_INTERVAL_MS 2000  broker.conf transactionCheckInterval: how often it checks
#   MQLEASE_TX_CHECK_MAX   60      broker.conf transactionCheckMax: checks before a half message is dropped
#   MQLEASE_ACL            0       1: the proxy checks every call's signature and permissions
#                                  (enableACL) against two accounts in conf/plain_acl.yml:
#                                  mqlease-admin / mqlease-admin-secret (admin) and
#                                  mqlease-readonly / mqlease-readonly-secret (SUB on every
#                                  topic and group, no PUB). Use it on an instance of your own.
#   MQLEASE_CLUSTER        0       1: cluster mode, as RocketMQ is deployed for real: namesrv, one
#                                  broker JVM (BrokerStartup) and TWO proxy JVMs (ProxyStartup
#                                  -pm cluster) that reach the broker through namesrv. Proxy 1
#                                  serves gRPC on MQLEASE_GRPC_PORT, proxy 2 on MQLEASE_GRPC_PORT2
#                                  (default GRPC_PORT+2; remoting MQLEASE_REMOTING_PORT2, default
#                                  REMOTING_PORT+2). Use it on an instance of your own.
#   MQLEASE_BROKERS        1       cluster mode: 2 starts a second broker JVM, broker-b (same
#                                  cluster DefaultCluster, its own brokerName, store $RUN/store-b
#                                  and ports); `topics` then creates every topic with 4 queues on
#                                  EACH broker (8 in the route) and every group on both.
#   MQLEASE_BROKER_B_PORT  BROKER_PORT+10   broker-b's port (it also binds PORT-2 and PORT+1)
# Ports are deliberately not RocketMQ's defaults (9876/10911/8081/8080) so a developer's own
# RocketMQ keeps working next to the tests. namesrv and the broker bind 127.0.0.1; the gRPC,
# proxy-remoting and HA ports bind the wildcard (RocketMQ 5.2.0 has no setting for them).
# Logs: $MQLEASE_RUN/*.out (JVM stdout) and $MQLEASE_RUN/home/*/logs/rocketmqlogs/.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROCKETMQ_VERSION=${ROCKETMQ_VERSION:-5.2.0}
CACHE=${MQLEASE_CACHE:-$HOME/.cache/mqlease}
LIB=$CACHE/rocketmq-$ROCKETMQ_VERSION/lib
RUN=${MQLEASE_RUN:-/tmp/mqlease-rocketmq}
NS_PORT=${MQLEASE_NAMESRV_PORT:-19876}
BROKER_PORT=${MQLEASE_BROKER_PORT:-20911}
GRPC_PORT=${MQLEASE_GRPC_PORT:-18081}
REMOTING_PORT=${MQLEASE_REMOTING_PORT:-18080}
TX_TIMEOUT_MS=${MQLEASE_TX_TIMEOUT_MS:-3000}
TX_CHECK_INTERVAL_MS=${MQLEASE_TX_CHECK_INTERVAL_MS:-2000}
TX_CHECK_MAX=${MQLEASE_TX_CHECK_MAX:-60}
HOST=127.0.0.1
BOOT_TIMEOUT=${MQLEASE_BOOT_TIMEOUT:-180}  # s per JVM; typically a few s, a minute on a loaded CI box
STOP_GRACE=${MQLEASE_STOP_GRACE:-15}  # seconds between SIGTERM and SIGKILL
ACL=${MQLEASE_ACL:-0}
CLUSTER=${MQLEASE_CLUSTER:-0}
GRPC_PORT2=${MQLEASE_GRPC_PORT2:-$((GRPC_PORT + 2))}
REMOTING_PORT2=${MQLEASE_REMOTING_PORT2:-$((REMOTING_PORT + 2))}
BROKERS=${MQLEASE_BROKERS:-1}
BROKER_B_PORT=${MQLEASE_BROKER_B_PORT:-$((BROKER_PORT + 10))}
[[ $BROKERS == 1 || $BROKERS == 2 ]] || { echo "rocketmq: error: MQLEASE_BROKERS must be 1 or 2" >&2; exit 1; }
[[ $BROKERS == 1 || $CLUSTER == 1 ]] || { echo "rocketmq: error: MQLEASE_BROKERS=2 needs cluster mode (MQLEASE_CLUSTER=1)" >&2; exit 1; }
# JVMs of this run dir, in the order they are stopped (proxies before the brokers before namesrv)
if [[ $CLUSTER == 1 && $BROKERS == 2 ]]; then JVMS=(proxy1 proxy2 broker broker-b namesrv)
elif [[ $CLUSTER == 1 ]]; then JVMS=(proxy1 proxy2 broker namesrv)
else JVMS=(proxy namesrv); fi
# host:port of every broker, comma-separated: what CreateTopics creates topics and groups on
BROKER_ADDRS=$HOST:$BROKER_PORT
[[ $BROKERS != 2 ]] || BROKER_ADDRS="$BROKER_ADDRS,$HOST:$BROKER_B_PORT"
ACL_JSON=''

# JDK 17 flags: the store casts mmapped buffers to sun.nio.ch.DirectBuffer on shutdown and on
# file deletion (IllegalAccessError without the export); the rest are what rocketmq-local.md
# section 4 recommends for a flat classpath on 17.
JOPT=(--add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
      --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED
      -XX:-OmitStackTraceInFastThrow)

APT_LINE='apt-get install -y openjdk-17-jdk-headless maven'

# True if ROCKETMQ_VERSION is $1 or later.
version_at_least() { [[ $(printf '%s\n' "$1" "$ROCKETMQ_VERSION" | sort -V | head -n1) == "$1" ]]; }

die() { echo "rocketmq: error: $*" >&2; exit 1; }
# Seconds since $1 (an $EPOCHREALTIME value), one decimal.
elapsed() { local now=${EPOCHREALTIME/,/.}; awk -v a="${1/,/.}" -v b="$now" 'BEGIN { printf "%.1f", b - a }'; }
log() { echo "rocketmq: $*"; }

need_java() {
  command -v java >/dev/null 2>&1 || die "java not found; install it with:
  $APT_LINE"
  # The single-file source launcher used by `topics` needs Java 11+; RocketMQ 5 itself runs on 8+.
  local v
  v=$(java -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')
  case $v in 1.*|9|10|'') die "java $v is too old (need 11+, tested with 17); install:
  $APT_LINE" ;; esac
}

# True if something accepts TCP connections on 127.0.0.1:$1 (bash /dev/tcp; no nc needed).
port_open() { timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$HOST" "$1" 2>/dev/null; }

# The lib dir counts as complete only once the marker exists. It only ever appears whole: mvn
# fills a fresh directory beside it, which is renamed to lib/ once the jars are all there. A
# jar that a cut download or copy left half-written is never reused, because copy-dependencies
# keeps any jar already in its output directory that is newer than the repository's.
lib_complete() { [[ -f $LIB/.complete && -f $LIB/rocketmq-proxy-$ROCKETMQ_VERSION.jar ]]; }

cmd_fetch() {
  need_java
  if lib_complete; then return 0; fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found (needed once to fetch the RocketMQ jars); install it with:
  $APT_LINE"
  local base=$CACHE/rocketmq-$ROCKETMQ_VERSION
  mkdir -p "$base"
  # One fetch at a time per cache dir (fd 8; fd 9 is the run dir's lock): another run may be
  # filling the same cache, and then this one waits for its jars.
  exec 8>"$base/.lock"
  flock -w 600 8 || die "timed out waiting for the lock $base/.lock"
  if lib_complete; then exec 8>&-; return 0; fi
  log "fetching RocketMQ $ROCKETMQ_VERSION jars into $LIB (one-time, needs Maven Central)"
  # Under the lock nobody else writes here: what a killed fetch left goes.
  local part=$base/lib.part
  rm -rf "$part" "$LIB"
  mkdir -p "$part"
  # Runtime scope matters: bcpkix (runtime-only) is needed by the proxy's self-signed TLS cert.
  # Output goes to a log, shown without ANSI codes (Debian's Maven 3.8 emits "ESC[0m" even
  # with -B). -C (--strict-checksums): a download that does not match its .sha1 fails the
  # fetch; Maven 3.8's default only warns (unseen under -q) and keeps the jar.
  local mlog=$base/mvn.log rc=0 flat=()
  # 5.4.0 and later: flattened module POMs and no rocketmq-all to import (see pom.xml)
  if version_at_least 5.4.0; then flat=(-Drocketmq.flat); fi
  mvn -B -q -C -f "$SCRIPT_DIR/rocketmq/pom.xml" -Drocketmq.version="$ROCKETMQ_VERSION" "${flat[@]}" \
    org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
    -DoutputDirectory="$part" -DincludeScope=runtime </dev/null >"$mlog" 2>&1 || rc=$?
  sed 's/\x1b\[[0-9;]*m//g; /^[[:space:]]*$/d' "$mlog" >&2
  if ((rc != 0)) && grep -q 'Checksum validation failed' "$mlog"; then
    die "mvn stopped: a downloaded file failed its checksum validation (it does not match its checksum: corrupted or altered on the way; or the repository served no checksum; log $mlog); nothing was cached, try again or check the network's proxy or mirror"
  fi
  ((rc == 0)) || die "mvn could not fetch RocketMQ $ROCKETMQ_VERSION (exit $rc, log $mlog); try another ROCKETMQ_VERSION"
  [[ -f $part/rocketmq-proxy-$ROCKETMQ_VERSION.jar && -f $part/rocketmq-namesrv-$ROCKETMQ_VERSION.jar \
     && -f $part/rocketmq-tools-$ROCKETMQ_VERSION.jar ]] \
    || die "mvn finished but $part lacks the rocketmq-{proxy,namesrv,tools}-$ROCKETMQ_VERSION jars"
  touch "$part/.complete"
  mv -T "$part" "$LIB"
  exec 8>&-
}

# --- process bookkeeping ------------------------------------------------------------------
# A pid file exists only for a JVM this script launched. Every JVM gets a marker system
# property naming the run dir, so a recycled pid (or somebody else's RocketMQ) is never
# mistaken for ours and never killed.
marker() { echo "-Dmqlease.rocketmq=$RUN/$1"; }
pid_file() { echo "$RUN/$1.pid"; }

# Prints the pid of our live JVM named $1 (namesrv|proxy); fails if there is none.
our_pid() {
  local f pid
  f=$(pid_file "$1")
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
  # Zombies have an empty cmdline, so they correctly count as gone.
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF -- "$(marker "$1")" || return 1
  echo "$pid"
}

lock() {
  mkdir -p "$RUN"
  exec 9>"$RUN/.lock"
  # Serialises concurrent start/stop calls (e.g. parallel spec runs) on the same run dir.
  flock -w 300 9 || die "timed out waiting for the lock $RUN/.lock"
}

# launch NAME OUTFILE java-args...: detached (own session, stdin from /dev/null, output to a
# file) so the JVM neither dies with the caller's terminal/process group nor keeps a caller's
# pipe open; the lock fd 9 is closed so the JVM cannot hold the lock. The shell writes its own
# pid and then execs java, so the pid file holds the JVM's pid.
launch() {
  local name=$1 out=$2; shift 2
  : >"$out"
  setsid bash -c 'echo $$ >"$0"; exec "$@"' "$(pid_file "$name")" "$@" \
    </dev/null >"$out" 2>&1 9>&- &
  local i
  for i in $(seq 50); do [[ -s $(pid_file "$name") ]] && return 0; sleep 0.1; done
  die "could not launch $name"
}

# wait_for NAME OUTFILE PATTERN: poll the JVM's stdout for its readiness line.
wait_for() {
  local name=$1 out=$2 pattern=$3 deadline=$((SECONDS + BOOT_TIMEOUT))
  while ! grep -qF -- "$pattern" "$out"; do
    if ! our_pid "$name" >/dev/null; then
      echo "rocketmq: error: $name exited during startup; last 40 lines of $out:" >&2
      tail -n 40 "$out" >&2
      stop_ours >&2
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      echo "rocketmq: error: $name did not print \"$pattern\" within ${BOOT_TIMEOUT}s; last 40 lines of $out:" >&2
      tail -n 40 "$out" >&2
      stop_ours >&2
      exit 1
    fi
    sleep 0.3
  done
}

# write_broker_conf FILE BROKER_NAME PORT STORE_DIR: a broker's config (the keys: write_configs)
write_broker_conf() {
  cat >"$1" <<EOF
brokerClusterName=DefaultCluster
brokerName=$2
brokerId=0
brokerRole=ASYNC_MASTER
flushDiskType=ASYNC_FLUSH
brokerIP1=$HOST
brokerIP2=$HOST
bindAddress=$HOST
listenPort=$3
storePathRootDir=$4
storePathCommitLog=$4/commitlog
autoCreateSubscriptionGroup=true
mappedFileSizeCommitLog=67108864
maxHashSlotNum=10000
maxIndexNum=40000
diskMaxUsedSpaceRatio=95
recallMessageEnable=true
transactionTimeOut=$TX_TIMEOUT_MS
transactionCheckInterval=$TX_CHECK_INTERVAL_MS
transactionCheckMax=$TX_CHECK_MAX
transactionOpBatchInterval=500
EOF
}

write_configs() {
  # Name server: the port is only settable through the properties file.
  cat >"$RUN/namesrv.conf" <<EOF
listenPort=$NS_PORT
bindAddress=$HOST
EOF
  # Broker (keys = setters of BrokerConfig/NettyServerConfig/MessageStoreConfig; unknown keys
  # are silently ignored). brokerIP1 becomes the host of every route the proxy returns in
  # local mode, so it must be loopback; brokerIP2 (the advertised HA address) defaults to a
  # non-loopback address too. Small mmapped files keep disk/RAM use low; the timer wheel
  # stays on (default) so DELAY messages work. recallMessageEnable (5.3.2+, default false)
  # lets RecallMessage take a delay message back (RecallMessageProcessor refuses with
  # "recall failed, operation is forbidden" without it); older brokers ignore the key.
  # stays on (default) so DELAY messages work. The transaction check runs every
  # MQLEASE_TX_CHECK_INTERVAL_MS and asks about half messages older than MQLEASE_TX_TIMEOUT_MS
  # (BrokerConfig's defaults are 30 s and 6 s: the specs would wait minutes for a check),
  # up to MQLEASE_TX_CHECK_MAX times (BrokerConfig's 15) before the broker drops the message.
  # The op messages that mark half messages ended are written every 0.5 s instead of 3 s
  # (transactionOpBatchInterval), so a check rarely meets a transaction just ended.
  write_broker_conf "$RUN/broker.conf" broker-a "$BROKER_PORT" "$RUN/store"
  [[ $BROKERS != 2 ]] || write_broker_conf "$RUN/broker-b.conf" broker-b "$BROKER_B_PORT" "$RUN/store-b"
  # 5.5+ lite topics (RIP-83): a lite topic is a light message queue, "%LMQ%$<parent>$<lite>",
  # that the store fills by multi-dispatch; both switches are off by default
  # (MessageStoreConfig), and without them a lite message reaches no lite consumer. The broker
  # drops a client's lite subscription that was not sent again for
  # liteSubscriptionCheckTimeoutMills (3 min, checked every 2 min): 10 s, checked every 2 s,
  # here, so lite_topic_spec sees a consumer that stopped sending its set lose it.
  if version_at_least 5.5.0; then
    local lite='enableLmq=true\nenableMultiDispatch=true\nliteSubscriptionCheckTimeoutMills=10000\nliteSubscriptionCheckInterval=2000\n'
    printf "$lite" >>"$RUN/broker.conf"
    [[ $BROKERS != 2 ]] || printf "$lite" >>"$RUN/broker-b.conf"
  fi
  # Proxy: the gRPC port must be fixed because local-mode routes echo it back to clients;
  # a 2 s route refresh shortens the proxy's negative cache for topics created late;
  # grpcShutdownTimeSeconds (default 30) bounds how long SIGTERM waits for open client streams.
  cat >"$RUN/rmq-proxy.json" <<EOF
{
  "rocketMQClusterName": "DefaultCluster",
  "proxyMode": "local",
  "namesrvAddr": "$HOST:$NS_PORT",
  "grpcServerPort": $GRPC_PORT,
  "remotingListenPort": $REMOTING_PORT,
  "localServeAddr": "$HOST",
  "topicRouteServiceCacheRefreshSeconds": 2,
  "grpcShutdownTimeSeconds": 3$ACL_JSON
}
EOF
}

# Cluster mode: proxy N's config. Routes a cluster-mode proxy returns name the address the
# client asked with, on the proxy's own gRPC port (RouteActivity.convertToAddressList), so each
# client stays on the proxy it dialed. The broker is found through namesrv, also for a receipt
# handle taken through the other proxy (the handle names its broker).
write_cluster_proxy_config() {
  local n=$1 grpc=$2 remoting=$3
  cat >"$RUN/rmq-proxy$n.json" <<EOF
{
  "rocketMQClusterName": "DefaultCluster",
  "proxyMode": "cluster",
  "proxyName": "mqlease-proxy-$n",
  "namesrvAddr": "$HOST:$NS_PORT",
  "grpcServerPort": $grpc,
  "remotingListenPort": $remoting,
  "localServeAddr": "$HOST",
  "topicRouteServiceCacheRefreshSeconds": 2,
  "grpcShutdownTimeSeconds": 3$ACL_JSON
}
EOF
}

# ACL 1.0 as RocketMQ 5.2.0 has it: the proxy's AuthenticationInterceptor runs the plain
# validator (PlainAccessValidator, accounts from $ROCKETMQ_HOME/conf/plain_acl.yml) on every
# gRPC call when enableACL is true. The embedded broker keeps aclEnable=false: in local mode
# gRPC calls reach it in-process, and the admin tool (topics, groups) talks to it directly.
write_acl() {
  ACL_JSON=$',\n  "enableACL": true'
  cat >"$RUN/conf/plain_acl.yml" <<EOF
globalWhiteRemoteAddresses: []
accounts:
  - accessKey: mqlease-admin
    secretKey: mqlease-admin-secret
    whiteRemoteAddress:
    admin: true
  - accessKey: mqlease-readonly
    secretKey: mqlease-readonly-secret
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
EOF
}

cmd_start() {
  lock
  if port_open "$GRPC_PORT" && port_open "$NS_PORT"; then
    # Either our earlier `start` or someone else's instance: use it, and do not take
    # ownership (no pid files are written, so `stop` will not touch a foreign instance).
    log "reusing the instance on $HOST:$GRPC_PORT"
    return 0
  fi
  # A half-up instance of ours (e.g. the proxy crashed) is useless: restart from scratch.
  if any_ours; then
    log "our previous instance in $RUN is only partly running; restarting it"
    stop_ours
  fi
  local p
  local ports=("$NS_PORT" "$BROKER_PORT" $((BROKER_PORT - 2)) $((BROKER_PORT + 1)) "$GRPC_PORT" "$REMOTING_PORT")
  [[ $CLUSTER != 1 ]] || ports+=("$GRPC_PORT2" "$REMOTING_PORT2")
  [[ $BROKERS != 2 ]] || ports+=("$BROKER_B_PORT" $((BROKER_B_PORT - 2)) $((BROKER_B_PORT + 1)))
  local free_by=$((SECONDS + 10))
  for p in "${ports[@]}"; do
    # Right after a stop (the next run's start) a port of the JVM just stopped may answer for
    # a moment: seen twice with the broker's HA port. Probably because a JVM counts as gone
    # once its cmdline is empty, which the kernel clears (the leader thread's exit) before
    # the last thread closes the sockets. So a busy port gets up to 10 s to go.
    while port_open "$p" && ((SECONDS < free_by)); do sleep 0.5; done
    ! port_open "$p" || die "port $HOST:$p is already in use by a process this script did not start;
  stop it or choose other ports (MQLEASE_NAMESRV_PORT, MQLEASE_BROKER_PORT [uses PORT-2..PORT+1], MQLEASE_GRPC_PORT, MQLEASE_REMOTING_PORT)"
  done
  cmd_fetch
  local t0=$EPOCHREALTIME
  # Fresh start: a store left by a killed broker has an `abort` file (slow abnormal recovery)
  # and old messages/offsets that would leak into the specs.
  rm -rf "$RUN/store" "$RUN/store-b" "$RUN/home" "$RUN/conf" "$RUN"/*.out "$RUN"/*.pid
  mkdir -p "$RUN/store" "$RUN/home/namesrv" "$RUN/home/proxy" "$RUN/home/tools" "$RUN/conf"
  mkdir -p "$RUN/home/broker" "$RUN/home/broker-b" "$RUN/home/proxy1" "$RUN/home/proxy2"
  # 5.2.0's proxy always instantiates the plain ACL validator, which insists on
  # $ROCKETMQ_HOME/conf/plain_acl.yml existing (AclException otherwise). An empty file means
  # no ACL data; ACL stays disabled (enableACL/aclEnable default to false).
  : >"$RUN/conf/plain_acl.yml"
  if [[ $ACL == 1 ]]; then write_acl; fi
  write_configs
  # ROCKETMQ_HOME must be set (namesrv/broker exit otherwise); only ACL files live there.
  export ROCKETMQ_HOME=$RUN
  # -Duser.home relocates each JVM's logs (~/logs/rocketmqlogs) and kv files into the run dir.
  # -Drmq.logback.configurationFile picks the module's bundled logback config; without it the
  # first one on the flat classpath (the proxy's) would win.
  # LoopbackNamesrv.java = NamesrvStartup, but its self-probe targets 127.0.0.1 instead of the
  # host's first non-loopback address (see the file). Launched from source: no build step.
  launch namesrv "$RUN/namesrv.out" java "${JOPT[@]}" -Xms64m -Xmx256m "$(marker namesrv)" \
    -Duser.home="$RUN/home/namesrv" -Drmq.logback.configurationFile=rmq.namesrv.logback.xml \
    -cp "$LIB/*" "$SCRIPT_DIR/rocketmq/LoopbackNamesrv.java" -c "$RUN/namesrv.conf"
  wait_for namesrv "$RUN/namesrv.out" "The Name Server boot success"
  # Started after namesrv, which the broker registers with.
  if [[ $CLUSTER == 1 ]]; then
    start_cluster
    local b="broker $HOST:$BROKER_PORT (pid $(our_pid broker))"
    [[ $BROKERS != 2 ]] || b="brokers broker-a $HOST:$BROKER_PORT (pid $(our_pid broker)) and broker-b $HOST:$BROKER_B_PORT (pid $(our_pid broker-b))"
    log "started RocketMQ $ROCKETMQ_VERSION in cluster mode in $(elapsed "$t0")s: namesrv $HOST:$NS_PORT (pid $(our_pid namesrv)), $b, gRPC proxies $HOST:$GRPC_PORT (pid $(our_pid proxy1)) and $HOST:$GRPC_PORT2 (pid $(our_pid proxy2)); run dir $RUN"
    return 0
  fi
  start_proxy
  log "started RocketMQ $ROCKETMQ_VERSION in $(elapsed "$t0")s: namesrv $HOST:$NS_PORT (pid $(our_pid namesrv)), broker $HOST:$BROKER_PORT + gRPC proxy $HOST:$GRPC_PORT (pid $(our_pid proxy)); run dir $RUN"
}

# Cluster mode: the broker JVM(s), then both proxies at once (each boots in seconds and they do
# not need each other). Small heaps: the test box has 2 cores and other JVMs (with two brokers:
# five JVMs, about 1.5 GB of heap at most).
start_cluster() {
  write_cluster_proxy_config 1 "$GRPC_PORT" "$REMOTING_PORT"
  write_cluster_proxy_config 2 "$GRPC_PORT2" "$REMOTING_PORT2"
  launch_broker broker
  [[ $BROKERS != 2 ]] || launch_broker broker-b
  wait_for broker "$RUN/broker.out" "boot success"
  [[ $BROKERS != 2 ]] || wait_for broker-b "$RUN/broker-b.out" "boot success"
  launch_cluster_proxy 1
  launch_cluster_proxy 2
  wait_for proxy1 "$RUN/proxy1.out" "rocketmq-proxy startup successfully"
  wait_for proxy2 "$RUN/proxy2.out" "rocketmq-proxy startup successfully"
  # as in local mode: make the broker(s) register with namesrv now, not in 10 s
  register_brokers "$BROKER_ADDRS" || { stop_ours >&2; exit 1; }
}

# register_brokers ADDR[,ADDR]: CreateTopics with no names makes each broker register with
# namesrv now (see CreateTopics.java) and waits until namesrv has it.
register_brokers() {
  if ! admin_java_on "$1" >"$RUN/register.out" 2>&1; then
    echo "rocketmq: error: the broker(s) $1 did not register with namesrv:" >&2
    cat "$RUN/register.out" >&2
    return 1
  fi
}

# launch_broker broker|broker-b: the broker JVM (BrokerStartup) on its config in $RUN.
launch_broker() {
  local name=$1 conf=$RUN/broker.conf heap=384m
  # two brokers: smaller heaps (the store's mmapped files live outside the heap)
  [[ $BROKERS != 2 ]] || heap=256m
  [[ $name == broker ]] || conf=$RUN/$name.conf
  mkdir -p "$RUN/home/$name"
  launch "$name" "$RUN/$name.out" java "${JOPT[@]}" -Xms128m -Xmx$heap -XX:MaxDirectMemorySize=256m \
    "$(marker "$name")" -Duser.home="$RUN/home/$name" -Drmq.logback.configurationFile=rmq.broker.logback.xml \
    -cp "$LIB/*" org.apache.rocketmq.broker.BrokerStartup -c "$conf" -n "$HOST:$NS_PORT"
}

# broker_jvm a|b: the JVM name of broker-a or broker-b (cluster mode), or die.
broker_jvm() {
  [[ $CLUSTER == 1 ]] || die "$2: only in cluster mode (MQLEASE_CLUSTER=1)"
  case $1 in
    a) echo broker ;;
    b) [[ $BROKERS == 2 ]] || die "$2 b: broker-b runs only with MQLEASE_BROKERS=2"; echo broker-b ;;
    *) die "$2: name the broker, a or b" ;;
  esac
}

# kill-broker a|b: SIGKILL, as a crashed host would; returns once it is gone. namesrv drops
# it from the routes at once (the broker's connection closes: BrokerHousekeepingService),
# and the proxies see the new routes within topicRouteServiceCacheRefreshSeconds (2 s).
cmd_kill_broker() {
  local name pid deadline=$((SECONDS + 10))
  name=$(broker_jvm "${1:-}" kill-broker)
  pid=$(our_pid "$name") || die "kill-broker: $name of $RUN is not running"
  kill -KILL "$pid"
  while our_pid "$name" >/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  ! our_pid "$name" >/dev/null || die "kill-broker: $name (pid $pid) survived SIGKILL"
  log "killed $name (pid $pid)"
}

# restart-broker a|b: the broker JVM again on its store (a killed one leaves an `abort` file:
# the slower abnormal recovery), then registered with namesrv.
cmd_restart_broker() {
  local name addr t0=$EPOCHREALTIME deadline=$((SECONDS + 10))
  name=$(broker_jvm "${1:-}" restart-broker)
  addr=$HOST:$BROKER_PORT
  [[ $name == broker ]] || addr=$HOST:$BROKER_B_PORT
  lock
  our_pid namesrv >/dev/null || die "restart-broker: no namesrv of ours runs in $RUN; use start"
  while our_pid "$name" >/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  ! our_pid "$name" >/dev/null || die "restart-broker: $name (pid $(our_pid "$name")) is still running"
  # the dead JVM's ports may answer for a moment (see cmd_start)
  local p port=${addr##*:} free_by=$((SECONDS + 10))
  for p in "$port" $((port - 2)) $((port + 1)); do
    while port_open "$p" && ((SECONDS < free_by)); do sleep 0.5; done
  done
  rm -f "$(pid_file "$name")"
  export ROCKETMQ_HOME=$RUN
  launch_broker "$name"
  wait_for "$name" "$RUN/$name.out" "boot success"
  register_brokers "$addr" || exit 1
  log "restarted $name in $(elapsed "$t0")s (pid $(our_pid "$name")); store kept"
}

launch_cluster_proxy() {
  local n=$1
  launch "proxy$n" "$RUN/proxy$n.out" java "${JOPT[@]}" -Xms64m -Xmx256m -XX:MaxDirectMemorySize=128m \
    "$(marker "proxy$n")" -Duser.home="$RUN/home/proxy$n" -Drmq.logback.configurationFile=rmq.proxy.logback.xml \
    -cp "$LIB/*" org.apache.rocketmq.proxy.ProxyStartup -pm cluster -pc "$RUN/rmq-proxy$n.json"
}

any_ours() {
  local name
  for name in "${JVMS[@]}"; do our_pid "$name" >/dev/null && return 0; done
  return 1
}

# The proxy JVM (with the broker inside), on the configs and the store already in $RUN.
start_proxy() {
  # Never pass -Dtls.server.mode=disabled here: it makes the gRPC port plaintext-only.
  launch proxy "$RUN/proxy.out" java "${JOPT[@]}" -Xms512m -Xmx1g -XX:MaxDirectMemorySize=512m \
    "$(marker proxy)" -Duser.home="$RUN/home/proxy" -Drmq.logback.configurationFile=rmq.proxy.logback.xml \
    -cp "$LIB/*" org.apache.rocketmq.proxy.ProxyStartup -pm local -pc "$RUN/rmq-proxy.json" \
    -bc "$RUN/broker.conf" -n "$HOST:$NS_PORT"
  wait_for proxy "$RUN/proxy.out" "rocketmq-proxy startup successfully"
  # The embedded 5.2.0 broker would first register with namesrv ~10 s from now; until then
  # topics it creates are invisible to QueryRoute. CreateTopics with no names makes it
  # register now (see CreateTopics.java), so `start` returns a fully usable instance.
  if ! admin_java >"$RUN/register.out" 2>&1; then
    echo "rocketmq: error: the broker did not register with namesrv:" >&2
    cat "$RUN/register.out" >&2
    stop_ours >&2
    exit 1
  fi
}

# restart-proxy: start the proxy JVM again after it died (e.g. kill -9 by a chaos spec),
# keeping namesrv and the store: the broker recovers its commit log, topics, groups and
# offsets from $RUN/store (an `abort` file left by a kill means the slower abnormal recovery).
cmd_restart_proxy() {
  local name=proxy n=${1:-1}
  if [[ $CLUSTER == 1 ]]; then
    [[ $n == 1 || $n == 2 ]] || die "restart-proxy: N must be 1 or 2"
    name=proxy$n
  fi
  lock
  our_pid namesrv >/dev/null || die "restart-proxy: no namesrv of ours runs in $RUN; use start"
  local t0=$EPOCHREALTIME deadline=$((SECONDS + 10))
  # a JVM just sent SIGKILL may take a moment to go
  while our_pid "$name" >/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  ! our_pid "$name" >/dev/null || die "restart-proxy: $name (pid $(our_pid "$name")) is still running"
  # launch waits for a fresh pid file: the dead JVM's must go first
  rm -f "$(pid_file "$name")"
  export ROCKETMQ_HOME=$RUN
  if [[ $CLUSTER == 1 ]]; then
    # the broker and its store live on in their own JVM; only the proxy comes back
    launch_cluster_proxy "$n"
    wait_for "$name" "$RUN/$name.out" "rocketmq-proxy startup successfully"
    log "restarted $name in $(elapsed "$t0")s (pid $(our_pid "$name"))"
    return 0
  fi
  start_proxy
  log "restarted the proxy in $(elapsed "$t0")s (pid $(our_pid proxy)); store $RUN/store kept"
}

# kill-proxy N (cluster mode): SIGKILL, as a crashed host would; returns once it is gone.
cmd_kill_proxy() {
  [[ $CLUSTER == 1 ]] || die "kill-proxy: only in cluster mode (MQLEASE_CLUSTER=1)"
  local n=${1:-} pid deadline=$((SECONDS + 10))
  [[ $n == 1 || $n == 2 ]] || die "kill-proxy: N must be 1 or 2"
  pid=$(our_pid "proxy$n") || die "kill-proxy: proxy$n of $RUN is not running"
  kill -KILL "$pid"
  while our_pid "proxy$n" >/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  ! our_pid "proxy$n" >/dev/null || die "kill-proxy: proxy$n (pid $pid) survived SIGKILL"
  log "killed proxy$n (pid $pid)"
}

# Stop our JVMs: SIGTERM both (proxy first; shutdown hooks flush the store and unregister the
# broker, which fails fast and harmlessly once namesrv is gone), wait up to STOP_GRACE seconds,
# then SIGKILL whatever is left. In parallel because the proxy alone needs ~9 s (the broker's
# shutdown joins its service threads one by one) and namesrv ~3 s.
stop_ours() {
  local name pid deadline t0=$EPOCHREALTIME
  local -A pids=()
  for name in "${JVMS[@]}"; do
    if pid=$(our_pid "$name"); then
      pids[$name]=$pid
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  if ((${#pids[@]} == 0)); then
    for name in "${JVMS[@]}"; do rm -f "$(pid_file "$name")"; done
    log "nothing of ours is running (run dir $RUN)"
    return 0
  fi
  alive() { local n; for n in "${!pids[@]}"; do our_pid "$n" >/dev/null && return 0; done; return 1; }
  deadline=$((SECONDS + STOP_GRACE))
  while alive && ((SECONDS < deadline)); do sleep 0.2; done
  for name in "${!pids[@]}"; do
    if our_pid "$name" >/dev/null; then
      log "$name (pid ${pids[$name]}) ignored SIGTERM for ${STOP_GRACE}s; sending SIGKILL"
      kill -KILL "${pids[$name]}" 2>/dev/null || true
    fi
  done
  deadline=$((SECONDS + 10))
  while alive && ((SECONDS < deadline)); do sleep 0.2; done
  for name in "${!pids[@]}"; do
    ! our_pid "$name" >/dev/null || die "$name (pid ${pids[$name]}) survived SIGKILL"
  done
  for name in "${JVMS[@]}"; do rm -f "$(pid_file "$name")"; done
  log "stopped $(for name in "${JVMS[@]}"; do [[ -n ${pids[$name]:-} ]] && printf '%s (pid %s) ' "$name" "${pids[$name]}"; done)in $(elapsed "$t0")s"
}

cmd_stop() { lock; stop_ours; }

cmd_status() {
  if port_open "$GRPC_PORT"; then
    echo "rocketmq: gRPC proxy answers on $HOST:$GRPC_PORT"; return 0
  fi
  echo "rocketmq: nothing answers on $HOST:$GRPC_PORT" >&2; return 1
}

cmd_env() {
  local endpoints=$HOST:$GRPC_PORT
  [[ $CLUSTER != 1 ]] || endpoints="$endpoints;$HOST:$GRPC_PORT2"
  cat <<EOF
MQLEASE_ENDPOINTS=$endpoints
MQLEASE_NAMESRV=$HOST:$NS_PORT
MQLEASE_BROKER=$HOST:$BROKER_PORT
MQLEASE_BROKER_ADDRS=$BROKER_ADDRS
MQLEASE_ROCKETMQ_VERSION=$ROCKETMQ_VERSION
MQLEASE_ROCKETMQ_RUN=$RUN
MQLEASE_ROCKETMQ_GROUPS=$(groups_policy)
EOF
}

# "create" if a consumer's group must exist before the consumer starts, "auto" if the broker
# creates it on first use. From 5.5.0 on the proxy looks the group up when a consumer's
# Telemetry settings arrive (ClientProcessor.registerConsumer -> validateLiteMode, for lite
# topics) and refuses one it cannot find: "group not found: G". In local mode that lookup reads
# the embedded broker's group table directly (LocalMetadataService), so the broker's
# autoCreateSubscriptionGroup (on in our broker.conf) never gets a say.
groups_policy() { if version_at_least 5.5.0; then echo create; else echo auto; fi; }

# All topics and groups are created in ONE admin JVM (each extra JVM costs seconds).
run_admin() {
  [[ $# -gt 0 ]] || die "nothing to create; usage: $0 topics NAME[:TYPE]... [--group G] | groups [--orderly] G..."
  need_java
  lib_complete || cmd_fetch
  port_open "$NS_PORT" && port_open "$BROKER_PORT" \
    || die "RocketMQ is not running on $HOST:$NS_PORT / $HOST:$BROKER_PORT; run '$0 start' first"
  admin_java "$@"
}

# admin_java ARG...: run CreateTopics.java (see there) against our ports, on every broker.
admin_java() { admin_java_on "$BROKER_ADDRS" "$@"; }

# admin_java_on ADDR[,ADDR] ARG...: the same on the brokers named.
admin_java_on() {
  local brokers=$1; shift
  mkdir -p "$RUN/home/tools"
  # C1-only JIT and a small heap: the JVM lives for a few seconds.
  java "${JOPT[@]}" -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Duser.home="$RUN/home/tools" \
    -Drmq.logback.configurationFile=rmq.tools.logback.xml -cp "$LIB/*" \
    "$SCRIPT_DIR/rocketmq/CreateTopics.java" "$HOST:$NS_PORT" "$brokers" "$@"
}

cmd_groups() {
  local args=() orderly=0 absent=0 g
  for g in "$@"; do
    case $g in
      --orderly) orderly=1 ;;
      --if-absent) absent=1 ;;
      -*) die "groups: unknown option $g" ;;
      *) if ((orderly)); then args+=(--orderly-group "$g")
         elif ((absent)); then args+=(--group-if-absent "$g")
         else args+=(--group "$g"); fi ;;
    esac
  done
  run_admin "${args[@]}"
}

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

cmd=${1:-}
[[ $# -gt 0 ]] && shift
case $cmd in
  fetch) cmd_fetch ;;
  start) cmd_start ;;
  restart-proxy) cmd_restart_proxy "$@" ;;
  kill-proxy) cmd_kill_proxy "$@" ;;
  kill-broker) cmd_kill_broker "$@" ;;
  restart-broker) cmd_restart_broker "$@" ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  topics) run_admin "$@" ;;
  groups) cmd_groups "$@" ;;
  lite-group) run_admin $(printf -- '--lite-group %s ' "$@") ;;
  broker-config) run_admin $(printf -- '--broker-config %s ' "$@") ;;
  *) usage ;;
esac
