#!/usr/bin/env bash
# Test harness: Redis as people run it in production, on loopback, for
# spec/integration/redis_sentinel_spec.lua and spec/integration/redis_cluster_spec.lua. Debian's
# redis-server only (Sentinel is `redis-server <conf> --sentinel`).
#
#   redis-ha.sh start-sentinel   master :16410, replica :16411, sentinels :16415-16417
#                                (monitoring "mqmaster", quorum 2, down after 1 s)
#   redis-ha.sh start-auth-sentinel
#                                one more sentinel, :16418, that wants a password itself
#                                (requirepass sentinel-secret; ACL user watcher/watcher-pass),
#                                naming the current master "mqauth" (it never fails over)
#   redis-ha.sh master           print the host:port the sentinels name now
#   redis-ha.sh kill-master      SIGKILL the master the sentinels name now
#   redis-ha.sh freeze-master    SIGSTOP the master the sentinels name now; prints its port
#   redis-ha.sh thaw PORT        SIGCONT the server on PORT (a frozen master comes back still
#                                a master, until the sentinels make it a replica)
#   redis-ha.sh role PORT        print the role the server on PORT reports (master, slave)
#   redis-ha.sh cut-replica      SIGSTOP the replica and drop its link on the master: the
#                                master's writes from now on never reach it
#   redis-ha.sh thaw-replica     SIGCONT the replica (it then waits for a master again)
#   redis-ha.sh start-cluster    6 nodes :16420-16425 (3 masters, 3 replicas; the first port is
#                                MQLEASE_REDIS_CLUSTER_PORT, the rest follow it)
#   redis-ha.sh reshard N        move N slots from the first master to the second, live
#   redis-ha.sh kill-node PORT   SIGKILL one cluster node
#   redis-ha.sh stop             stop everything this script started (all modes)
#
# Everything lives in MQLEASE_REDIS_HA_RUN (default /tmp/mqlease-redis-ha): configs,
# logs, pid files. Only processes whose pid file is there are ever signalled.
set -euo pipefail

RUN=${MQLEASE_REDIS_HA_RUN:-/tmp/mqlease-redis-ha}
HOST=127.0.0.1
MASTER_PORT=16410 REPLICA_PORT=16411 SENTINEL_PORTS=(16415 16416 16417) AUTH_SENTINEL_PORT=16418
CLUSTER_BASE=${MQLEASE_REDIS_CLUSTER_PORT:-16420}
CLUSTER_PORTS=()
for i in 0 1 2 3 4 5; do CLUSTER_PORTS+=($((CLUSTER_BASE + i))); done
NAME=mqmaster

die() { echo "redis-ha: error: $*" >&2; exit 1; }
log() { echo "redis-ha: $*"; }
cli() { timeout 5 redis-cli -h "$HOST" "$@"; }

wait_for() {   # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep 0.1
  done
}

start_server() {   # start_server PORT EXTRA_ARGS...
  local port=$1
  shift
  mkdir -p "$RUN/$port"
  redis-server --bind "$HOST" --port "$port" --save '' --appendonly no --daemonize yes \
    --pidfile "$RUN/$port/pid" --dir "$RUN/$port" --logfile "$RUN/$port/log" "$@" \
    || die "redis-server on :$port failed; see $RUN/$port/log"
  wait_for 10 "redis on :$port" bash -c "[[ \$(timeout 2 redis-cli -h $HOST -p $port ping) == PONG ]]"
}

sentinel_master() { cli -p "${SENTINEL_PORTS[0]}" sentinel get-master-addr-by-name "$NAME" | paste -sd: ; }

replica_known() {
  [[ $(cli -p "$1" sentinel replicas "$NAME" | grep -c "^$HOST:$REPLICA_PORT$\|^name$") -ge 1 ]] &&
    [[ $(cli -p "$1" sentinel sentinels "$NAME" | grep -c '^name$') -ge 2 ]]
}

start_sentinel() {   # start_sentinel PORT < the monitor lines (and any others) of its config
  local p=$1
  mkdir -p "$RUN/$p"
  {
    printf 'port %s\nbind %s\ndaemonize yes\n' "$p" "$HOST"
    printf 'pidfile %s\nlogfile %s\ndir %s\n' "$RUN/$p/pid" "$RUN/$p/log" "$RUN/$p"
    cat
  } >"$RUN/$p/sentinel.conf"
  redis-server "$RUN/$p/sentinel.conf" --sentinel || die "sentinel on :$p failed; see $RUN/$p/log"
}

cmd_start_sentinel() {
  mkdir -p "$RUN"
  start_server $MASTER_PORT
  start_server $REPLICA_PORT --replicaof $HOST $MASTER_PORT
  for p in "${SENTINEL_PORTS[@]}"; do
    start_sentinel "$p" <<CONF
sentinel monitor $NAME $HOST $MASTER_PORT 2
sentinel down-after-milliseconds $NAME 1000
sentinel failover-timeout $NAME 4000
sentinel parallel-syncs $NAME 1
CONF
  done
  for p in "${SENTINEL_PORTS[@]}"; do wait_for 30 "sentinel :$p to see the replica and its peers" replica_known "$p"; done
  wait_for 10 "the replica to sync" bash -c "timeout 2 redis-cli -h $HOST -p $REPLICA_PORT info replication | grep -q 'master_link_status:up'"
  log "sentinel setup ready: master $(sentinel_master), sentinels ${SENTINEL_PORTS[*]}"
}

# A sentinel that asks its own clients for a password (Redis >= 5.0.1 `requirepass` in
# Sentinel mode; ACL users from 6.2). Quorum 1 and a long down-after: it only answers.
cmd_start_auth_sentinel() {
  local p=$AUTH_SENTINEL_PORT m
  m=$(sentinel_master)
  [[ -n $m ]] || die "start-sentinel first"
  start_sentinel "$p" <<CONF
requirepass sentinel-secret
user watcher on >watcher-pass +@all
sentinel monitor mqauth ${m%:*} ${m##*:} 1
sentinel down-after-milliseconds mqauth 600000
CONF
  wait_for 10 "sentinel :$p" bash -c "[[ \$(timeout 2 redis-cli -h $HOST -p $p --no-auth-warning -a sentinel-secret ping) == PONG ]]"
  log "auth sentinel ready on :$p (master $m as mqauth)"
}

pid_of() {   # the pid from RUN/PORT/pid, if that process is still a redis-server
  local f=$RUN/$1/pid pid
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "redis-server" || return 1
  echo "$pid"
}

cmd_kill_port() {
  local pid
  pid=$(pid_of "$1") || die "nothing of ours runs on :$1"
  kill -KILL "$pid"
  log "killed the redis-server on :$1 (pid $pid)"
}

cmd_signal_port() {   # cmd_signal_port PORT SIGNAL
  local pid
  pid=$(pid_of "$1") || die "nothing of ours runs on :$1"
  kill -"$2" "$pid"
}

cmd_kill_master() {
  local m
  m=$(sentinel_master)
  cmd_kill_port "${m##*:}"
}

cluster_ok() {
  local p
  for p in "${CLUSTER_PORTS[@]}"; do
    cli -p "$p" cluster info | grep -q 'cluster_state:ok' || return 1
  done
}

cmd_start_cluster() {
  local p nodes=()
  mkdir -p "$RUN"
  for p in "${CLUSTER_PORTS[@]}"; do
    rm -f "$RUN/$p/nodes.conf"
    start_server "$p" --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-node-timeout 2000 --cluster-replica-validity-factor 0
    nodes+=("$HOST:$p")
  done
  cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$RUN/create.log" 2>&1 \
    || die "redis-cli --cluster create failed; see $RUN/create.log"
  wait_for 30 "cluster_state:ok on every node" cluster_ok
  log "cluster ready on ${CLUSTER_PORTS[*]}"
}

master_id() {   # the node id of the master listening on port $1
  cli -p "$1" cluster myid
}

cmd_reshard() {
  local from to
  from=$(master_id "${CLUSTER_PORTS[0]}")
  to=$(master_id "${CLUSTER_PORTS[1]}")
  timeout 120 redis-cli -h "$HOST" --cluster reshard "$HOST:${CLUSTER_PORTS[0]}" --cluster-from "$from" --cluster-to "$to" \
    --cluster-slots "$1" --cluster-yes >"$RUN/reshard.log" 2>&1 \
    || die "reshard failed; its last lines (the run dir goes at stop):
$(tail -n 15 "$RUN/reshard.log")"
  log "moved $1 slots from :${CLUSTER_PORTS[0]} to :${CLUSTER_PORTS[1]}"
}

cmd_stop() {
  local p pid n=0
  for p in $MASTER_PORT $REPLICA_PORT "${SENTINEL_PORTS[@]}" $AUTH_SENTINEL_PORT "${CLUSTER_PORTS[@]}"; do
    if pid=$(pid_of "$p"); then
      kill -CONT "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
      n=$((n + 1))
    fi
  done
  for p in $MASTER_PORT $REPLICA_PORT "${SENTINEL_PORTS[@]}" $AUTH_SENTINEL_PORT "${CLUSTER_PORTS[@]}"; do
    local deadline=$((SECONDS + 10))
    while pid_of "$p" >/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    if pid=$(pid_of "$p"); then kill -KILL "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$RUN"
  log "stopped $n server(s)"
}

case ${1:-} in
  start-sentinel) cmd_start_sentinel ;;
  start-auth-sentinel) cmd_start_auth_sentinel ;;
  master) sentinel_master ;;
  kill-master) cmd_kill_master ;;
  freeze-master)
    m=$(sentinel_master)
    cmd_signal_port "${m##*:}" STOP
    echo "${m##*:}" ;;
  thaw) cmd_signal_port "${2:?port}" CONT ;;
  role) cli -p "${2:?port}" role | head -n 1 ;;
  cut-replica)
    cmd_signal_port $REPLICA_PORT STOP
    m=$(sentinel_master)
    cli -p "${m##*:}" client kill type replica >/dev/null ;;
  thaw-replica) cmd_signal_port $REPLICA_PORT CONT ;;
  start-cluster) cmd_start_cluster ;;
  reshard) cmd_reshard "${2:?slots}" ;;
  kill-node) cmd_kill_port "${2:?port}" ;;
  stop) cmd_stop ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
