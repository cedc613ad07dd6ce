#!/usr/bin/env bash
# Test harness: a throw-away Redis (Debian's redis-server) on loopback for the specs.
#
#   redis.sh start    start it (or reuse one that already answers PING on the port)
#   redis.sh stop     stop it, only if `start` started it
#   redis.sh status   exit 0 if PING is answered
#
# Environment (optional):
#   MQLEASE_REDIS_PORT  16379 (not the default 6379, so a developer's own Redis is left alone)
#   MQLEASE_REDIS_RUN   /tmp/mqlease-redis   (pid file, log, working dir)
set -euo pipefail

PORT=${MQLEASE_REDIS_PORT:-16379}
RUN=${MQLEASE_REDIS_RUN:-/tmp/mqlease-redis}
HOST=127.0.0.1
PIDFILE=$RUN/redis.pid
OURS=$RUN/started-by-us   # written only when this script launched the server
APT_LINE='apt-get install -y redis-server'

die() { echo "redis: error: $*" >&2; exit 1; }
log() { echo "redis: $*"; }

need() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 \
    || die "redis-server/redis-cli not found; install them with:
  $APT_LINE"
}

ping() { [[ $(timeout 2 redis-cli -h "$HOST" -p "$PORT" ping 2>/dev/null) == PONG ]]; }

# Prints the pid of the server we started; fails if it is gone. The pid must still belong to
# a redis-server (pids get recycled) before we would ever signal it.
our_pid() {
  [[ -f $OURS && -f $PIDFILE ]] || return 1
  local pid
  pid=$(<"$PIDFILE")
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "redis-server.*:$PORT" || return 1
  echo "$pid"
}

lock() {
  mkdir -p "$RUN"
  exec 9>"$RUN/.lock"
  flock -w 60 9 || die "timed out waiting for the lock $RUN/.lock"
}

cmd_start() {
  need
  lock
  if ping; then
    # Ours from an earlier `start`, or somebody else's: use it and leave ownership as it is.
    log "reusing the Redis on $HOST:$PORT"
    return 0
  fi
  if our_pid >/dev/null; then
    die "our redis-server (pid $(our_pid)) is running but does not answer PING on $HOST:$PORT; see $RUN/redis.log"
  fi
  rm -f "$OURS" "$PIDFILE"
  # No persistence (the specs want an empty, fast Redis); --daemonize makes redis-server fork
  # and write the pid file itself. The lock fd is closed so the daemon cannot hold it.
  redis-server --bind "$HOST" --port "$PORT" --save '' --appendonly no --daemonize yes \
    --pidfile "$PIDFILE" --dir "$RUN" --logfile "$RUN/redis.log" 9>&- \
    || die "redis-server failed to start; see $RUN/redis.log"
  touch "$OURS"
  local deadline=$((SECONDS + 20))
  until ping; do
    if ((SECONDS >= deadline)); then
      echo "redis: error: no PONG from $HOST:$PORT within 20s; last lines of $RUN/redis.log:" >&2
      tail -n 20 "$RUN/redis.log" >&2 || true
      stop_ours >&2
      exit 1
    fi
    sleep 0.1
  done
  log "started redis-server on $HOST:$PORT (pid $(our_pid || echo '?')); run dir $RUN"
}

stop_ours() {
  local pid deadline
  if ! pid=$(our_pid); then
    log "nothing of ours is running on $HOST:$PORT"
    rm -f "$OURS" "$PIDFILE"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 10))
  while our_pid >/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
  if our_pid >/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
  fi
  ! our_pid >/dev/null || die "redis-server (pid $pid) survived SIGKILL"
  rm -f "$OURS" "$PIDFILE"
  log "stopped redis-server (pid $pid)"
}

cmd_stop() { lock; stop_ours; }

cmd_status() {
  need
  if ping; then
    echo "redis: answering on $HOST:$PORT"; return 0
  fi
  echo "redis: nothing answers on $HOST:$PORT" >&2; return 1
}

case ${1:-} in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
